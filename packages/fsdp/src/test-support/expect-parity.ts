import { expect } from 'vitest';
import { meanLosses, type ParityResult } from './parity.js';

/** Each element of `actual` within `rtol` (relative, absolute below 1) of `expected`'s. */
export function expectClose(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  rtol: number,
): void {
  expect(actual.length).toBe(expected.length);
  for (let i = 0; i < expected.length; i++) {
    const tol = rtol * Math.max(1, Math.abs(expected[i]!));
    if (!(Math.abs(actual[i]! - expected[i]!) <= tol)) {
      throw new Error(`element ${i}: ${actual[i]} vs ${expected[i]} (tolerance ${tol})`);
    }
  }
}

/** The ranks' mean losses and every rank's final parameters match the single-process run. */
export function expectParity(
  results: readonly ParityResult[],
  reference: ParityResult,
  rtol: number,
): void {
  expectClose(meanLosses(results), reference.losses, rtol);
  results.forEach((result) => {
    expect([...result.params.keys()].sort()).toEqual([...reference.params.keys()].sort());
    for (const [name, values] of reference.params) {
      expectClose(result.params.get(name)!, values, rtol);
    }
  });
}
