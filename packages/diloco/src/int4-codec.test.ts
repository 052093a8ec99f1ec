import { describe, expect, it } from 'vitest';
import { blockCodec, encodeWithFeedback } from './compression.js';
import { newSeed, randomValues } from './test-support/worlds.js';

function decodeAll(codec: ReturnType<typeof blockCodec>, words: Int32Array, count: number) {
  const out = new Float32Array(count);
  for (let b = 0; b * codec.blockSize < count; b++) {
    codec.decodeBlock(words, b * codec.wordsPerBlock, out, b * codec.blockSize, true);
  }
  return out;
}

describe('int4 codec', () => {
  it('one f32 scale (max|x| / 7) per block, nibbles round(x / scale), two a byte', () => {
    const codec = blockCodec('int4', 8);
    // A scale word and 8 nibbles (one word): 4 + 4 bytes for 8 elements.
    expect(codec.wordsPerBlock).toBe(2);
    expect(blockCodec('int4', 256).wordsPerBlock).toBe(33);
    expect(blockCodec('int4', 4).wordsPerBlock).toBe(2);
    const values = new Float32Array([0.7, -0.35, 0, 0.05, 0.3, -0.7, 0.1, 0.2, 0, 0, 0, 0]);
    const words = new Int32Array(2 * codec.wordsPerBlock);
    for (let b = 0; b < 2; b++) codec.encodeBlock(values, b, words, b * codec.wordsPerBlock);
    const scale = Math.fround(Math.fround(0.7) / 7);
    expect(new Float32Array(words.buffer)[0]).toBe(scale);
    const q = Array.from(values.subarray(0, 8), (x) => Math.round(x / scale));
    expect(q).toEqual([7, -3, 0, 1, 3, -7, 1, 2]);
    // Element 2j in the low nibble of byte j, 2j + 1 in the high one, two's complement.
    const bytes = new Uint8Array(words.buffer, 4, 4);
    expect(Array.from(bytes)).toEqual([
      7 | ((-3 & 0xf) << 4),
      0 | (1 << 4),
      3 | ((-7 & 0xf) << 4),
      1 | (2 << 4),
    ]);
    const decoded = decodeAll(codec, words, 12);
    expect(Array.from(decoded.subarray(0, 8))).toEqual(q.map((x) => Math.fround(x * scale)));
    // The second block (4 values, then padding) is all zeros: scale 0, nibbles 0.
    expect(new Float32Array(words.buffer)[2]).toBe(0);
    expect(Array.from(decoded.subarray(8))).toEqual([0, 0, 0, 0]);
  });

  it('round-trips within half a step of its grid (max|x| / 7 / 2), against float64', async () => {
    const seed = newSeed('int4 round trip');
    const values = await randomValues(seed, 1000, 3);
    const codec = blockCodec('int4', 64);
    const blocks = Math.ceil(1000 / 64);
    const words = new Int32Array(blocks * codec.wordsPerBlock);
    encodeWithFeedback(codec, values, null, blocks, words);
    const decoded = decodeAll(codec, words, 1000);
    for (let b = 0; b < blocks; b++) {
      const block = Array.from(values.subarray(b * 64, (b + 1) * 64));
      const max = Math.max(...block.map(Math.abs));
      for (const [i, x] of block.entries()) {
        expect(Math.abs(decoded[b * 64 + i]! - x)).toBeLessThanOrEqual(max / 7 / 2 + 1e-6);
      }
    }
  });

  it('error feedback: the sum of what was sent stays within one step of what was meant', async () => {
    const seed = newSeed('int4 error feedback');
    const codec = blockCodec('int4', 64);
    const count = 128;
    const run = async (feedback: boolean) => {
      const residual = feedback ? new Float32Array(count) : null;
      const meant = new Float64Array(count);
      const sent = new Float64Array(count);
      const words = new Int32Array(2 * codec.wordsPerBlock);
      for (let round = 0; round < 100; round++) {
        // Below half a step (0.5 / 7) next to one large value per block: rounded to 0 without feedback.
        const values = await randomValues(seed + round, count, 0.02);
        for (let i = 0; i < count; i++) values[i]! += 0.03;
        values[0] = 1;
        values[64] = -1;
        encodeWithFeedback(codec, values, residual, 2, words);
        const decoded = decodeAll(codec, words, count);
        for (let i = 0; i < count; i++) {
          meant[i]! += values[i]!;
          sent[i]! += decoded[i]!;
        }
      }
      let worst = 0;
      for (let i = 0; i < count; i++) worst = Math.max(worst, Math.abs(meant[i]! - sent[i]!));
      return worst;
    };
    const withFeedback = await run(true);
    expect(withFeedback).toBeLessThanOrEqual(1 / 7 + 1e-5);
    expect(await run(false)).toBeGreaterThan(10 * withFeedback);
  });
});
