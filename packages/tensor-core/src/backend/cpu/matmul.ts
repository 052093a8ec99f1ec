import type { Values } from './cpu-storage.js';

const BLOCK_K = 64;
const BLOCK_N = 512;

/**
 * [Note: the CPU matmul]
 * C[M, N] = A[M, K] B[K, N] for one batch element, accumulating in a Float64Array. The loop order
 * is i-k-j (the innermost loop streams a row of B and a row of C, so V8 keeps it tight and
 * cache-friendly), blocked over k and j so that the BLOCK_K x BLOCK_N panel of B stays in L2
 * while every row of A passes over it. Transposed operands are copied to row-major first; that
 * costs O(MK + KN) against the O(MNK) product.
 */
export function matmulBlock(
  a: Values,
  aOffset: number,
  b: Values,
  bOffset: number,
  acc: Float64Array,
  m: number,
  k: number,
  n: number,
): void {
  acc.fill(0, 0, m * n);
  for (let k0 = 0; k0 < k; k0 += BLOCK_K) {
    const k1 = Math.min(k, k0 + BLOCK_K);
    for (let j0 = 0; j0 < n; j0 += BLOCK_N) {
      const j1 = Math.min(n, j0 + BLOCK_N);
      for (let i = 0; i < m; i++) {
        const cRow = i * n;
        const aRow = aOffset + i * k;
        let kk = k0;
        // Two rows of B per pass halves the loads and stores of C.
        for (; kk + 1 < k1; kk += 2) {
          const a0 = a[aRow + kk]!;
          const a1 = a[aRow + kk + 1]!;
          const b0 = bOffset + kk * n;
          const b1 = b0 + n;
          for (let j = j0; j < j1; j++) {
            acc[cRow + j] = acc[cRow + j]! + a0 * b[b0 + j]! + a1 * b[b1 + j]!;
          }
        }
        if (kk < k1) {
          const a0 = a[aRow + kk]!;
          const b0 = bOffset + kk * n;
          for (let j = j0; j < j1; j++) acc[cRow + j] = acc[cRow + j]! + a0 * b[b0 + j]!;
        }
      }
    }
  }
}

/** Row-major copy of the transpose of a [rows, cols] matrix at `offset`: [cols, rows]. */
export function transposeCopy(
  src: Values,
  offset: number,
  rows: number,
  cols: number,
  into: Float64Array,
): Float64Array {
  for (let r = 0; r < rows; r++) {
    const base = offset + r * cols;
    for (let c = 0; c < cols; c++) into[c * rows + r] = src[base + c]!;
  }
  return into;
}
