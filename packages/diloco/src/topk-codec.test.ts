import { describe, expect, it } from 'vitest';
import { referenceDecoded, referenceTopk } from './test-support/topk-reference.js';
import { newSeed, randomValues } from './test-support/worlds.js';
import { encodeSparseWithFeedback, TopkCodec } from './topk-codec.js';

/** Decode `words` into a dense vector of `count`. */
function decodeAll(codec: TopkCodec, words: Int32Array, count: number): Float32Array {
  const out = new Float32Array(count);
  codec.decode(words, 0, out, 1);
  return out;
}

function encode(codec: TopkCodec, values: Float32Array): Int32Array {
  const words = new Int32Array(codec.words);
  encodeSparseWithFeedback(codec, values, null, 1, words);
  return words;
}

/** A codec of runs of `chunk` across `count` values, levels per run (no shapes). */
const runs = (count: number, chunk: number, density: number) =>
  new TopkCodec(count, null, chunk, density);

describe('topk codec', () => {
  it('sizes: k, index bits and words per chunk, exactly', () => {
    // The defaults: 64 of 4096, 12-bit indices + 2 bits, 64 x 14 = 896 bits = 28 words, + 2 levels.
    const sizes = (codec: TopkCodec) => {
      const { tiles, words } = codec.segments[0]!;
      return [tiles[0]!.k, tiles[0]!.indexBits, words];
    };
    expect(sizes(runs(4096, 4096, 1 / 64))).toEqual([64, 12, 30]);
    // 3 % of 4096 rounds to 123 entries: 1722 bits, 54 words (53.8), + 2.
    expect(runs(4096, 4096, 0.03).words).toBe(56);
    // The largest chunk takes 16-bit indices; a tiny density still sends one entry.
    expect(sizes(runs(65536, 65536, 1e-9))).toEqual([1, 16, 3]);
    expect(sizes(runs(64, 64, 0.1))).toEqual([6, 6, 4]);
    // A partial last run takes a whole run's k and words: 2 runs of 30 words.
    expect(runs(5000, 4096, 1 / 64).words).toBe(60);
  });

  it('follows the float64 reference: the top k of each chunk (ties to the lower index), 2-bit values', async () => {
    const seed = newSeed('topk reference');
    // An odd length (a partial last chunk), ties, zeros, and a chunk with fewer non-zeros than k.
    const count = 1000;
    const values = await randomValues(seed, count, 2);
    values[5] = 1.75;
    values[9] = -1.75;
    values[17] = 1.75;
    for (let i = 128; i < 192; i++) values[i] = i % 16 === 0 ? (i - 150) / 10 : 0;
    values.fill(0, 192, 256);
    for (const [chunkSize, density] of [
      [64, 0.1],
      [256, 1 / 64],
      [1000, 0.03],
      [4096, 1 / 64],
    ] as const) {
      const codec = runs(count, chunkSize, density);
      const k = codec.segments[0]!.tiles[0]!.k;
      const perChunk = codec.segments[0]!.words;
      const words = encode(codec, values);
      const got = decodeAll(codec, words, count);
      const want = referenceDecoded(values, chunkSize, k);
      expect(Array.from(got)).toEqual(Array.from(want));
      // The wire holds the reference's f32 levels, bit for bit.
      const floats = new Float32Array(words.buffer);
      for (const [c, chunk] of referenceTopk(values, chunkSize, k).entries()) {
        expect(floats[c * perChunk]).toBe(chunk.low);
        expect(floats[c * perChunk + 1]).toBe(chunk.high);
      }
    }
    // The chunk of 64 elements at 128 holds 4 non-zeros (k = 6): all sent, with their signs.
    const codec = runs(count, 64, 0.1);
    const got = decodeAll(codec, encode(codec, values), count);
    expect([128, 144, 160, 176].map((i) => Math.sign(got[i]!))).toEqual([-1, -1, 1, 1]);
    expect(got.subarray(192, 256).every((x) => x === 0)).toBe(true);
    // Ties go to the lower index: of eight equal values, the first two; all on the high level.
    const tied = runs(8, 8, 0.25);
    const equal = decodeAll(tied, encode(tied, new Float32Array(8).fill(-0.5)), 8);
    expect(Array.from(equal)).toEqual([-0.5, -0.5, 0, 0, 0, 0, 0, 0]);
  });

  it('decays and feeds back what it did not send, as the float64 reference does', async () => {
    const seed = newSeed('topk feedback');
    const count = 300;
    const codec = runs(count, 64, 0.05);
    const k = codec.segments[0]!.tiles[0]!.k;
    const decay = 0.95;
    const residual = new Float32Array(count);
    const e = new Float64Array(count);
    const words = new Int32Array(codec.words);
    for (let round = 0; round < 6; round++) {
      const values = await randomValues(seed + round, count, 1);
      encodeSparseWithFeedback(codec, values, residual, decay, words);
      // The reference keeps e as the implementation stores it: f32 after each update.
      for (let i = 0; i < count; i++) e[i] = Math.fround(decay * e[i]! + values[i]!);
      const sent = referenceDecoded(e, 64, k);
      expect(Array.from(decodeAll(codec, words, count))).toEqual(Array.from(sent));
      for (let i = 0; i < count; i++) e[i] = Math.fround(e[i]! - sent[i]!);
      expect(Array.from(residual)).toEqual(Array.from(e));
    }
  });

  it('decoding with counts adds 1 at each position an entry lands on, nowhere else', async () => {
    const seed = newSeed('topk counts');
    const count = 300;
    const codec = runs(count, 64, 1 / 8);
    const k = 8;
    const values = await randomValues(seed, count);
    const words = encode(codec, values);
    const out = new Float32Array(count);
    const counts = new Uint32Array(count);
    // Two contributions of the same words: each kept position is counted twice.
    for (let twice = 0; twice < 2; twice++) codec.decode(words, 0, out, 1, counts);
    const kept = referenceDecoded(values, 64, k);
    for (let i = 0; i < count; i++) expect(counts[i]).toBe(kept[i] === 0 ? 0 : 2);
    // 5 chunks (the last of 44 values), 8 entries each.
    expect(counts.reduce((s, c) => s + c, 0)).toBe(2 * 5 * k);
  });

  it('with decay 1, what was sent plus what is still owed is what was meant', async () => {
    const seed = newSeed('topk conservation');
    const count = 512;
    const codec = runs(count, 128, 1 / 32);
    const residual = new Float32Array(count);
    const meant = new Float64Array(count);
    const sent = new Float64Array(count);
    const words = new Int32Array(codec.words);
    for (let round = 0; round < 40; round++) {
      const values = await randomValues(seed + round, count, 1e-2);
      encodeSparseWithFeedback(codec, values, residual, 1, words);
      const decoded = decodeAll(codec, words, count);
      for (let i = 0; i < count; i++) {
        meant[i]! += values[i]!;
        sent[i]! += decoded[i]!;
      }
    }
    for (let i = 0; i < count; i++) {
      expect(Math.abs(sent[i]! + residual[i]! - meant[i]!)).toBeLessThan(1e-5);
    }
  });
});
