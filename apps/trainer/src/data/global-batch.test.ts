import { describe, expect, it } from 'vitest';
import { rankMicroBatches, sampleStart } from './global-batch.js';

describe('the global batch rule', () => {
  const tokens = Int32Array.from({ length: 100 }, (_, i) => 1000 + i);

  it('starts global sample j of step s at ((s B + j) T) mod (N - T - 1)', () => {
    // B 4, T 8, N 100: period 91.
    expect([0, 1, 2, 3].map((j) => sampleStart(0, j, 4, 8, 100))).toEqual([0, 8, 16, 24]);
    expect([0, 1, 2, 3].map((j) => sampleStart(3, j, 4, 8, 100))).toEqual([5, 13, 21, 29]);
    expect(sampleStart(2 ** 40, 3, 4, 8, 100)).toBe(Number(((2n ** 40n * 4n + 3n) * 8n) % 91n));
  });

  it('gives inputs [start, start + T) and targets shifted by one', () => {
    const [batch] = rankMicroBatches(tokens, {
      step: 3,
      batchSize: 4,
      blockSize: 8,
      rank: 0,
      worldSize: 1,
      microBatches: 1,
    });
    expect([...batch!.inputs.subarray(8, 16)]).toEqual(
      Array.from({ length: 8 }, (_, i) => 1013 + i),
    );
    expect([...batch!.targets.subarray(8, 16)]).toEqual(
      Array.from({ length: 8 }, (_, i) => 1014 + i),
    );
  });

  it('splits the same global batch over ranks and micro-batches, in sample order', () => {
    const whole = rankMicroBatches(tokens, {
      step: 5,
      batchSize: 8,
      blockSize: 8,
      rank: 0,
      worldSize: 1,
      microBatches: 1,
    })[0]!;
    const parts = [0, 1].flatMap((rank) =>
      rankMicroBatches(tokens, {
        step: 5,
        batchSize: 8,
        blockSize: 8,
        rank,
        worldSize: 2,
        microBatches: 2,
      }),
    );
    expect(parts.map((p) => p.batchSize)).toEqual([2, 2, 2, 2]);
    expect(parts.flatMap((p) => [...p.inputs])).toEqual([...whole.inputs]);
    expect(parts.flatMap((p) => [...p.targets])).toEqual([...whole.targets]);
  });
});
