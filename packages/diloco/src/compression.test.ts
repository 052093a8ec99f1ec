import { describe, expect, it } from 'vitest';
import { blockCodec, encodeWithFeedback } from './compression.js';
import { newSeed, randomValues } from './test-support/worlds.js';

/** Decode `blocks` blocks of `words` into `count` values. */
function decodeAll(codec: ReturnType<typeof blockCodec>, words: Int32Array, count: number) {
  const out = new Float32Array(count);
  for (let b = 0; b * codec.blockSize < count; b++) {
    codec.decodeBlock(words, b * codec.wordsPerBlock, out, b * codec.blockSize, true);
  }
  return out;
}

describe('block codecs', () => {
  it('int8: one f32 scale (max|x| / 127) per block, bytes round(x / scale)', () => {
    const codec = blockCodec('int8', 8);
    expect(codec.wordsPerBlock).toBe(3);
    const values = new Float32Array([1.27, -0.5, 0, 0.01, 0.635, -1.27, 0.3, 0.2, 0, 0, 0, 0]);
    const words = new Int32Array(2 * codec.wordsPerBlock);
    for (let b = 0; b < 2; b++) codec.encodeBlock(values, b, words, b * codec.wordsPerBlock);
    const scale = Math.fround(1.27 / 127);
    expect(new Float32Array(words.buffer)[0]).toBe(scale);
    expect([...new Int8Array(words.buffer, 4, 8)]).toEqual(
      [1.27, -0.5, 0, 0.01, 0.635, -1.27, 0.3, 0.2].map((x) => Math.round(Math.fround(x) / scale)),
    );
    // The second block (4 values, then padding) is all zeros: scale 0, bytes 0.
    expect(new Float32Array(words.buffer)[3]).toBe(0);
    expect([...decodeAll(codec, words, 12)].slice(8)).toEqual([0, 0, 0, 0]);
  });

  it('int8 and bf16 round-trip within half a step of their grid', async () => {
    const seed = newSeed('codec round trip');
    const values = await randomValues(seed, 1000, 3);
    for (const name of ['int8', 'bf16'] as const) {
      const codec = blockCodec(name, 256);
      const blocks = Math.ceil(1000 / 256);
      const words = new Int32Array(blocks * codec.wordsPerBlock);
      encodeWithFeedback(codec, values, null, blocks, words);
      const decoded = decodeAll(codec, words, 1000);
      for (let b = 0; b < blocks; b++) {
        const block = values.subarray(b * 256, (b + 1) * 256);
        const max = Math.max(...block.map(Math.abs));
        for (let i = 0; i < block.length; i++) {
          const x = block[i]!;
          const bound = name === 'int8' ? max / 127 / 2 + 1e-7 : Math.abs(x) * 2 ** -8;
          expect(Math.abs(decoded[b * 256 + i]! - x)).toBeLessThanOrEqual(bound);
        }
      }
    }
  });
});

describe('error feedback', () => {
  // Small signals next to one large value per block: int8 rounds most of them to 0 every round, so without
  // feedback they are never sent; with it, what was sent sums to what was meant.
  async function run(errorFeedback: boolean, rounds: number, seed: number) {
    const codec = blockCodec('int8', 256);
    const count = 512;
    const meantSum = new Float64Array(count);
    const sentSum = new Float64Array(count);
    const residual = errorFeedback ? new Float32Array(count) : null;
    const words = new Int32Array(2 * codec.wordsPerBlock);
    for (let round = 0; round < rounds; round++) {
      // Positive on average (1e-3 +- 1e-3), below half a step of the grid (0.5 / 127).
      const values = await randomValues(seed + round, count, 1e-3);
      for (let i = 0; i < count; i++) values[i]! += 1e-3;
      values[0] = 1;
      values[256] = -1;
      encodeWithFeedback(codec, values, residual, 2, words);
      const sent = decodeAll(codec, words, count);
      for (let i = 0; i < count; i++) {
        meantSum[i]! += values[i]!;
        sentSum[i]! += sent[i]!;
      }
    }
    let worst = 0;
    for (let i = 0; i < count; i++) worst = Math.max(worst, Math.abs(meantSum[i]! - sentSum[i]!));
    return worst;
  }

  it('int8: the sum of what was sent converges to the sum of what was meant', async () => {
    const seed = newSeed('error feedback');
    // One quantization step (1 / 127) bounds the gap whatever the number of rounds.
    const step = 1 / 127;
    const at50 = await run(true, 50, seed);
    const at200 = await run(true, 200, seed);
    expect(at50).toBeLessThanOrEqual(step);
    expect(at200).toBeLessThanOrEqual(step);
    // Without feedback the gap is the dropped signal itself and grows with the rounds.
    const without = await run(false, 200, seed);
    expect(without).toBeGreaterThan(10 * at200);
  });
});
