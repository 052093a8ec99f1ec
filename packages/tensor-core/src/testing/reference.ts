import type { DType } from '../dtype.js';
import { roundToDType } from '../dtype-convert.js';
import { philoxUniform } from '../random/philox.js';

/**
 * `count` deterministic values in [low, high) (Philox with `seed`), in double precision: test data
 * that is the same on every run and backend.
 */
export function seededValues(count: number, seed: number, low = -2, high = 2): number[] {
  const out = new Float64Array(count);
  philoxUniform(out, seed, 0, low, high);
  return [...out];
}

/** The values as storing them in `dtype` would give them back (the inputs a reference must use). */
export function roundValues(values: ArrayLike<number>, dtype: DType): number[] {
  return Array.from(values, (v) => roundToDType(v, dtype));
}

/** Row-major strides of a shape. */
export function stridesOf(shape: readonly number[]): number[] {
  const strides = new Array<number>(shape.length);
  let s = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i]!;
  }
  return strides;
}

/** The multi-index of flat element `flat` in `shape`. */
export function unravel(flat: number, shape: readonly number[]): number[] {
  const index = new Array<number>(shape.length);
  let rest = flat;
  for (let i = shape.length - 1; i >= 0; i--) {
    const d = shape[i]!;
    index[i] = d === 0 ? 0 : rest % d;
    rest = d === 0 ? 0 : Math.floor(rest / d);
  }
  return index;
}

/** Flat element of `shape` that index `outIndex` (of a broadcast result) reads, NumPy rules. */
export function broadcastIndex(outIndex: readonly number[], shape: readonly number[]): number {
  const strides = stridesOf(shape);
  const lead = outIndex.length - shape.length;
  let flat = 0;
  for (let i = 0; i < shape.length; i++) {
    flat += (shape[i] === 1 ? 0 : outIndex[lead + i]!) * strides[i]!;
  }
  return flat;
}

/** Float64 reference of an elementwise op over broadcast operands. */
export function broadcastReference(
  shapes: readonly (readonly number[])[],
  inputs: readonly (readonly number[])[],
  outShape: readonly number[],
  f: (...args: number[]) => number,
): number[] {
  const size = outShape.reduce((p, d) => p * d, 1);
  const out: number[] = [];
  for (let i = 0; i < size; i++) {
    const index = unravel(i, outShape);
    out.push(f(...inputs.map((values, k) => values[broadcastIndex(index, shapes[k]!)]!)));
  }
  return out;
}

/** Float64 matmul reference with a triple loop: a [M, K], b [K, N]. */
export function matmulReference(
  a: readonly number[],
  b: readonly number[],
  m: number,
  k: number,
  n: number,
): number[] {
  const out = new Array<number>(m * n).fill(0);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let acc = 0;
      for (let p = 0; p < k; p++) acc += a[i * k + p]! * b[p * n + j]!;
      out[i * n + j] = acc;
    }
  }
  return out;
}
