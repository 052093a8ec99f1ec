import { ArgumentError } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { BatchSampler } from './batches.js';

describe('BatchSampler', () => {
  it('draws windows whose targets are the inputs shifted by one, the same for the same seed', () => {
    const tokens = Int32Array.from({ length: 100 }, (_, i) => i);
    const a = new BatchSampler(tokens, 3, 8, 42);
    const b = new BatchSampler(tokens, 3, 8, 42);
    for (let step = 0; step < 5; step++) {
      const x = a.next();
      expect(b.next()).toEqual(x);
      for (let row = 0; row < 3; row++) {
        const start = x.inputs[row * 8]!;
        expect(start).toBeLessThan(92);
        expect([...x.inputs.subarray(row * 8, row * 8 + 8)]).toEqual(
          Array.from({ length: 8 }, (_, i) => start + i),
        );
        expect([...x.targets.subarray(row * 8, row * 8 + 8)]).toEqual(
          Array.from({ length: 8 }, (_, i) => start + i + 1),
        );
      }
    }
    expect(new BatchSampler(tokens, 3, 8, 43).next()).not.toEqual(
      new BatchSampler(tokens, 3, 8, 42).next(),
    );
  });

  it('rejects a corpus shorter than one window', () => {
    expect(() => new BatchSampler(new Int32Array(8), 1, 8, 0)).toThrow(
      new ArgumentError('BatchSampler', '8 tokens are too few for windows of 8 + 1'),
    );
  });
});
