import { describe, expect, it } from 'vitest';
import { referenceDecoded, referenceTopk } from './test-support/topk-reference.js';
import { newSeed, randomValues } from './test-support/worlds.js';
import { encodeSparseWithFeedback, TopkCodec } from './topk-codec.js';

/** Decode every chunk of `words` into a dense vector of `count`. */
function decodeAll(codec: TopkCodec, words: Int32Array, count: number): Float32Array {
  const out = new Float32Array(count);
  for (let c = 0; c < codec.chunks(count); c++) {
    codec.decodeChunk(words, c * codec.wordsPerChunk, out, c * codec.chunkSize, 1);
  }
  return out;
}

function encode(codec: TopkCodec, values: Float32Array): Int32Array {
  const words = new Int32Array(codec.chunks(values.length) * codec.wordsPerChunk);
  encodeSparseWithFeedback(codec, values, null, 1, words);
  return words;
}

describe('topk codec', () => {
  it('sizes: k, index bits and words per chunk, exactly', () => {
    // The defaults: 64 of 4096, 12-bit indices + 2 bits, 64 x 14 = 896 bits = 28 words, + 2 levels.
    const defaults = new TopkCodec(4096, 1 / 64);
    expect([defaults.k, defaults.indexBits, defaults.entryBits, defaults.wordsPerChunk]).toEqual([
      64, 12, 14, 30,
    ]);
    // 3 % of 4096 rounds to 123 entries: 1722 bits, 54 words (53.8), + 2.
    expect(new TopkCodec(4096, 0.03).wordsPerChunk).toBe(56);
    // The largest chunk takes 16-bit indices; a tiny density still sends one entry.
    const largest = new TopkCodec(65536, 1e-9);
    expect([largest.k, largest.indexBits, largest.wordsPerChunk]).toEqual([1, 16, 3]);
    const small = new TopkCodec(64, 0.1);
    expect([small.k, small.indexBits, small.wordsPerChunk]).toEqual([6, 6, 4]);
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
      const codec = new TopkCodec(chunkSize, density);
      const words = encode(codec, values);
      const got = decodeAll(codec, words, count);
      const want = referenceDecoded(values, chunkSize, codec.k);
      expect(Array.from(got)).toEqual(Array.from(want));
      // The wire holds the reference's f32 levels, bit for bit.
      const floats = new Float32Array(words.buffer);
      for (const [c, chunk] of referenceTopk(values, chunkSize, codec.k).entries()) {
        expect(floats[c * codec.wordsPerChunk]).toBe(chunk.low);
        expect(floats[c * codec.wordsPerChunk + 1]).toBe(chunk.high);
      }
    }
    // The chunk of 64 elements at 128 holds 4 non-zeros (k = 6): all sent, with their signs.
    const codec = new TopkCodec(64, 0.1);
    const got = decodeAll(codec, encode(codec, values), count);
    expect([128, 144, 160, 176].map((i) => Math.sign(got[i]!))).toEqual([-1, -1, 1, 1]);
    expect(got.subarray(192, 256).every((x) => x === 0)).toBe(true);
    // Ties go to the lower index: of eight equal values, the first two; all on the high level.
    const tied = new TopkCodec(8, 0.25);
    const equal = decodeAll(tied, encode(tied, new Float32Array(8).fill(-0.5)), 8);
    expect(Array.from(equal)).toEqual([-0.5, -0.5, 0, 0, 0, 0, 0, 0]);
  });

  it('decays and feeds back what it did not send, as the float64 reference does', async () => {
    const seed = newSeed('topk feedback');
    const count = 300;
    const codec = new TopkCodec(64, 0.05);
    const decay = 0.95;
    const residual = new Float32Array(count);
    const e = new Float64Array(count);
    const words = new Int32Array(codec.chunks(count) * codec.wordsPerChunk);
    for (let round = 0; round < 6; round++) {
      const values = await randomValues(seed + round, count, 1);
      encodeSparseWithFeedback(codec, values, residual, decay, words);
      // The reference keeps e as the implementation stores it: f32 after each update.
      for (let i = 0; i < count; i++) e[i] = Math.fround(decay * e[i]! + values[i]!);
      const sent = referenceDecoded(e, 64, codec.k);
      expect(Array.from(decodeAll(codec, words, count))).toEqual(Array.from(sent));
      for (let i = 0; i < count; i++) e[i] = Math.fround(e[i]! - sent[i]!);
      expect(Array.from(residual)).toEqual(Array.from(e));
    }
  });

  it('decoding with counts adds 1 at each position an entry lands on, nowhere else', async () => {
    const seed = newSeed('topk counts');
    const count = 300;
    const codec = new TopkCodec(64, 1 / 8);
    const values = await randomValues(seed, count);
    const words = encode(codec, values);
    const out = new Float32Array(count);
    const counts = new Uint32Array(count);
    // Two contributions of the same words: each kept position is counted twice.
    for (let twice = 0; twice < 2; twice++) {
      for (let c = 0; c < codec.chunks(count); c++) {
        codec.decodeChunk(words, c * codec.wordsPerChunk, out, c * codec.chunkSize, 1, counts);
      }
    }
    const kept = referenceDecoded(values, 64, codec.k);
    for (let i = 0; i < count; i++) expect(counts[i]).toBe(kept[i] === 0 ? 0 : 2);
    // 5 chunks (the last of 44 values), 8 entries each.
    expect(counts.reduce((s, c) => s + c, 0)).toBe(2 * 5 * codec.k);
  });

  it('with decay 1, what was sent plus what is still owed is what was meant', async () => {
    const seed = newSeed('topk conservation');
    const count = 512;
    const codec = new TopkCodec(128, 1 / 32);
    const residual = new Float32Array(count);
    const meant = new Float64Array(count);
    const sent = new Float64Array(count);
    const words = new Int32Array(codec.chunks(count) * codec.wordsPerChunk);
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
