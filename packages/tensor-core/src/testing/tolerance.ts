import type { DType } from '../dtype.js';
import { WebshardError } from '../errors.js';

/** A closeness test: |actual - expected| <= atol + rtol * |expected| per element. */
export interface Tolerance {
  rtol: number;
  atol: number;
}

/**
 * Default tolerances for one op's output stored in `dtype`: a few units of the format's rounding
 * (f16 has 11 significant bits, bf16 8) on top of f32 compute differences between backends.
 */
export function toleranceFor(dtype: DType): Tolerance {
  switch (dtype) {
    case 'f64':
      return { rtol: 1e-12, atol: 1e-12 };
    case 'f32':
      return { rtol: 2e-5, atol: 1e-6 };
    case 'f16':
      return { rtol: 2e-3, atol: 1e-3 };
    case 'bf16':
      return { rtol: 1.6e-2, atol: 1e-2 };
    case 'i32':
      return { rtol: 0, atol: 0 };
  }
}

/** Thrown by `expectClose` on a mismatch (a test failure with the first bad index). */
export class ClosenessError extends WebshardError {
  constructor(message: string) {
    super(message, { code: 'E_NOT_CLOSE' });
  }
}

function same(a: number, b: number): boolean {
  return Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b)) || a === b;
}

/**
 * Assert that `actual` matches `expected` elementwise within the tolerance (NaN matches NaN,
 * infinities must match exactly). Throws `ClosenessError` naming the first mismatch, the worst
 * error and how many elements differ.
 */
export function expectClose(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  tolerance: Partial<Tolerance> & { dtype?: DType } = {},
): void {
  const base = toleranceFor(tolerance.dtype ?? 'f32');
  const rtol = tolerance.rtol ?? base.rtol;
  const atol = tolerance.atol ?? base.atol;
  if (actual.length !== expected.length) {
    throw new ClosenessError(
      `[expectClose] length ${actual.length} differs from the expected ${expected.length}`,
    );
  }
  let bad = 0;
  let first = -1;
  let worst = 0;
  for (let i = 0; i < actual.length; i++) {
    const a = actual[i]!;
    const e = expected[i]!;
    if (same(a, e)) continue;
    const error = Math.abs(a - e);
    const ok = Number.isFinite(e) && Number.isFinite(a) && error <= atol + rtol * Math.abs(e);
    if (!ok) {
      bad++;
      if (first < 0) first = i;
      if (!(error <= worst)) worst = error;
    }
  }
  if (bad > 0) {
    throw new ClosenessError(
      `[expectClose] ${bad} of ${actual.length} elements differ (rtol ${rtol}, atol ${atol}); first at ${first}: got ${actual[first]}, expected ${expected[first]}; worst error ${worst}`,
    );
  }
}
