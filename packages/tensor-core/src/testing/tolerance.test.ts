import { describe, expect, it } from 'vitest';
import { ClosenessError, expectClose, toleranceFor } from './tolerance.js';

describe('expectClose', () => {
  it('accepts values within atol + rtol * |expected| and matching NaN/inf', () => {
    expect(() =>
      expectClose([1.00001, Number.NaN, Infinity], [1, Number.NaN, Infinity]),
    ).not.toThrow();
    expect(() => expectClose([1.09], [1], { rtol: 0.1, atol: 0 })).not.toThrow();
    expect(() => expectClose([1.11], [1], { rtol: 0.1, atol: 0 })).toThrow(ClosenessError);
  });

  it('names the first mismatch, the count and the worst error', () => {
    expect(() => expectClose([1, 2.5, 3, 9], [1, 2, 3, 4], { dtype: 'f32' })).toThrow(
      ClosenessError,
    );
    expect(() => expectClose([1, 2.5, 3, 9], [1, 2, 3, 4])).toThrow(
      '[expectClose] 2 of 4 elements differ (rtol 0.00002, atol 0.000001); first at 1: got 2.5, expected 2; worst error 5',
    );
    expect(() => expectClose([Infinity], [1e308])).toThrow(ClosenessError);
    expect(() => expectClose([1, 2], [1])).toThrow(
      '[expectClose] length 2 differs from the expected 1',
    );
  });

  it('gives wider tolerances to narrower formats', () => {
    expect(toleranceFor('bf16').rtol).toBeGreaterThan(toleranceFor('f16').rtol);
    expect(toleranceFor('f16').rtol).toBeGreaterThan(toleranceFor('f32').rtol);
    expect(toleranceFor('i32')).toEqual({ rtol: 0, atol: 0 });
  });
});
