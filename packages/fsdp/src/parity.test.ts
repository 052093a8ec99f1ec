import { describe, expect, it } from 'vitest';
import { meanLosses, trainLocal, trainSingle } from './test-support/parity.js';

function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, rtol: number): void {
  expect(actual.length).toBe(expected.length);
  for (let i = 0; i < expected.length; i++) {
    const tol = rtol * Math.max(1, Math.abs(expected[i]!));
    if (!(Math.abs(actual[i]! - expected[i]!) <= tol)) {
      throw new Error(`element ${i}: ${actual[i]} vs ${expected[i]} (tolerance ${tol})`);
    }
  }
}

const RUN = { steps: 4, batch: 8 };

describe('FSDP parity with single-process training (local transport)', () => {
  for (const world of [1, 2, 4]) {
    for (const nested of [false, true]) {
      it(`world ${world}, ${nested ? 'nested' : 'flat'}`, async () => {
        const reference = await trainSingle(RUN);
        const results = await trainLocal(world, { ...RUN, nested });
        expectClose(meanLosses(results), reference.losses, 1e-5);
        for (const result of results) {
          expect([...result.params.keys()].sort()).toEqual([...reference.params.keys()].sort());
          for (const [name, values] of reference.params) {
            expectClose(result.params.get(name)!, values, 1e-5);
          }
        }
      });
    }
  }
});
