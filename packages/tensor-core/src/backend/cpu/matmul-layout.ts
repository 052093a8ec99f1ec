/** The WASM matmul's shapes and the arithmetic of its memory's layout, shared by its call plans. */

/** One f32 matmul call's shapes: C[batch, m, n] = A[batchA, m, k] B[batchB, k, n]. */
export interface MatmulShape {
  batch: number;
  batchA: number;
  batchB: number;
  m: number;
  k: number;
  n: number;
  /** A is stored [k, m] per batch element. */
  transposeA: boolean;
  /** B is stored [n, k] per batch element. */
  transposeB: boolean;
}

export const align16 = (bytes: number) => Math.ceil(bytes / 16) * 16;
export const roundUp = (x: number, to: number) => Math.ceil(x / to) * to;

/**
 * Copies `runs` runs of `length` floats, the r-th from `src` at `from + r * stride`, side by side
 * into `heap` from `at`: a window of a row-major matrix (some of its columns in every row).
 */
export function copyRuns(
  heap: Float32Array,
  at: number,
  src: Float32Array,
  from: number,
  runs: number,
  stride: number,
  length: number,
): void {
  for (let r = 0; r < runs; r++) {
    const start = from + r * stride;
    heap.set(src.subarray(start, start + length), at + r * length);
  }
}
