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
  it('sizes: k, Elias-Fano low bits and words per chunk, exactly', () => {
    // [Note: top-k indices]: k l low bits + a bitmap of k + ((L - 1) >> l) + 2 k bits of codes,
    // l the smallest total (ties: the lower l), then 2 words of levels.
    const sizes = (codec: TopkCodec) => {
      const { tiles, words } = codec.segments[0]!;
      return [tiles[0]!.k, tiles[0]!.lowBits, tiles[0]!.bits, words];
    };
    // The default density, 96 of 4096: l 5, 480 + 96 + 127 + 192 = 895 bits, 28 words, + 2: the
    // 120 bytes that 64 entries with 12-bit indices took.
    expect(sizes(runs(4096, 4096, 0.0234375))).toEqual([96, 5, 895, 30]);
    // 64 of 4096: l 5 (6 gives as many bits), 320 + 64 + 127 + 128 = 639 bits, 20 words, + 2.
    expect(sizes(runs(4096, 4096, 1 / 64))).toEqual([64, 5, 639, 22]);
    // 3 % of 4096 rounds to 123 entries: 615 + 123 + 127 + 246 = 1111 bits, 35 words, + 2.
    expect(runs(4096, 4096, 0.03).words).toBe(37);
    // The largest chunk; a tiny density still sends one entry.
    expect(sizes(runs(65536, 65536, 1e-9))).toEqual([1, 15, 19, 3]);
    expect(sizes(runs(64, 64, 0.1))).toEqual([6, 3, 43, 4]);
    // A partial last run takes a whole run's k and words: 2 runs of 22 words.
    expect(runs(5000, 4096, 1 / 64).words).toBe(44);
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

  it('Elias-Fano indices round-trip: any set of at most k positions, the first and last included', async () => {
    const seed = newSeed('topk elias-fano');
    // [Note: top-k indices]: tile lengths from 7 to 65536, k from 1 to the whole tile, lists of
    // 0, 1, k - 1 and k entries (shorter lists repeat their last index), ends included.
    const noise = await randomValues(seed, 4096);
    let draw = 0;
    const next = () => Math.abs(noise[draw++ % noise.length]!);
    for (const [length, density] of [
      [7, 3 / 7],
      [7, 1],
      [64, 0.1],
      [832, 13 / 832],
      [4096, 0.0234375],
      [4096, 1 / 64],
      [65536, 1 / 4096],
    ] as const) {
      const codec = runs(length, length, density);
      const k = codec.segments[0]!.tiles[0]!.k;
      for (const m of new Set([0, 1, k - 1, k])) {
        const picked = new Set<number>();
        if (m >= 1) picked.add(0);
        if (m >= 2) picked.add(length - 1);
        while (picked.size < m) picked.add(Math.floor(next() * length) % length);
        const values = new Float32Array(length);
        for (const i of picked) values[i] = 0.5 + next();
        const got = decodeAll(codec, encode(codec, values), length);
        const at = [...got.keys()].filter((i) => got[i] !== 0);
        expect({ length, m, at }).toEqual({ length, m, at: [...picked].sort((x, y) => x - y) });
      }
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
