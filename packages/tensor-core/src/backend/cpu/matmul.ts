import type { KernelTensor } from '../backend.js';
import { outputValues, readValues, shapeCount, type Values } from './cpu-storage.js';
import { type MatmulShape, WasmMatmul } from './matmul-wasm.js';

const BLOCK_K = 128;
const BLOCK_N = 256;

/**
 * [Note: the CPU matmul]
 * C[M, N] = A[M, K] B[K, N] for one batch element. Both operands are first copied into row-major
 * Float64Arrays (transposing on the way when asked), so the hot loop sees one element kind and
 * stays monomorphic; that copy is O(MK + KN) against the O(MNK) product. The loop order is i-k-j:
 * the innermost loop streams a row of B into a row of C. It is blocked over k and j, so the
 * BLOCK_K x BLOCK_N panel of B (256 KiB) stays in L2 while every row of A passes over it, and
 * unrolled over four rows of B, which quarters the loads and stores of C.
 */
export function matmulBlock(
  a: Float64Array,
  b: Float64Array,
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
        const aRow = i * k;
        let kk = k0;
        for (; kk + 3 < k1; kk += 4) {
          const a0 = a[aRow + kk]!;
          const a1 = a[aRow + kk + 1]!;
          const a2 = a[aRow + kk + 2]!;
          const a3 = a[aRow + kk + 3]!;
          const b0 = kk * n;
          const b1 = b0 + n;
          const b2 = b1 + n;
          const b3 = b2 + n;
          for (let j = j0; j < j1; j++) {
            acc[cRow + j] =
              acc[cRow + j]! +
              a0 * b[b0 + j]! +
              a1 * b[b1 + j]! +
              a2 * b[b2 + j]! +
              a3 * b[b3 + j]!;
          }
        }
        for (; kk < k1; kk++) {
          const a0 = a[aRow + kk]!;
          const b0 = kk * n;
          for (let j = j0; j < j1; j++) acc[cRow + j] = acc[cRow + j]! + a0 * b[b0 + j]!;
        }
      }
    }
  }
}

/**
 * Copy a [rows, cols] matrix at `offset` into `into` as doubles: row-major as is, or its
 * transpose ([cols, rows]) when `transpose`.
 */
export function toRowMajor(
  src: Values,
  offset: number,
  rows: number,
  cols: number,
  transpose: boolean,
  into: Float64Array,
): Float64Array {
  if (!transpose) {
    for (let i = 0; i < rows * cols; i++) into[i] = src[offset + i]!;
    return into;
  }
  for (let r = 0; r < rows; r++) {
    const base = offset + r * cols;
    for (let c = 0; c < cols; c++) into[c * rows + r] = src[base + c]!;
  }
  return into;
}

/**
 * The backend's `matmul`: batched, broadcast over a batch of 1, either operand transposed. f32 runs
 * on `wasm` when given (see [Note: the WASM SIMD matmul]); everything else, and f32 where `wasm` is
 * null, runs the TypeScript kernel below.
 */
export function matmulKernel(
  a: KernelTensor,
  b: KernelTensor,
  out: KernelTensor,
  transposeA: boolean,
  transposeB: boolean,
  wasm: WasmMatmul | null = null,
): void {
  const [batch, m, n] = out.shape as [number, number, number];
  const k = transposeA ? a.shape[1]! : a.shape[2]!;
  const batchA = a.shape[0]!;
  const batchB = b.shape[0]!;
  if (wasm !== null && a.dtype === 'f32' && b.dtype === 'f32' && out.dtype === 'f32') {
    const shape: MatmulShape = { batch, batchA, batchB, m, k, n, transposeA, transposeB };
    if (WasmMatmul.accepts(shape)) {
      const o = outputValues(out);
      wasm.run(
        readValues(a) as Float32Array,
        readValues(b) as Float32Array,
        o.values as Float32Array,
        shape,
      );
      o.commit();
      return;
    }
  }
  const av = readValues(a);
  const bv = readValues(b);
  const o = outputValues(out);
  const acc = new Float64Array(m * n);
  const aMat = new Float64Array(m * k);
  const bMat = new Float64Array(k * n);
  for (let p = 0; p < batch; p++) {
    // A [M, K] is stored [K, M] when transposeA; B [K, N] is stored [N, K] when transposeB.
    if (p === 0 || batchA !== 1) {
      const [rows, cols] = transposeA ? [k, m] : [m, k];
      toRowMajor(av, (batchA === 1 ? 0 : p) * m * k, rows, cols, transposeA, aMat);
    }
    if (p === 0 || batchB !== 1) {
      const [rows, cols] = transposeB ? [n, k] : [k, n];
      toRowMajor(bv, (batchB === 1 ? 0 : p) * k * n, rows, cols, transposeB, bMat);
    }
    matmulBlock(aMat, bMat, acc, m, k, n);
    o.values.set(acc, p * m * n);
  }
  o.commit();
}

/**
 * [Note: the bias in the gemm]
 * A linear layer, x W^T + b, was a matmul and then a broadcast add: the add read the product back
 * and wrote it again, through the kernels module's own memory (the default GPT's eight biased
 * products, 0.39 ms of a 12-13 ms CPU step on the 2-core EPYC, issue 49). The backend's `linear`
 * writes the bias into each row of C in the matmul module's memory and runs the gemm with `acc`,
 * which adds each k block's sums to C. Where k is one block (k <= 256, the gemm's KC) C gets
 * b + s for the product's sum s, one rounding, which is s + b, the add's one rounding: the same
 * bits as the two ops. With k past one block the sums would be added to b block by block, not
 * summed first, so `linear` declines and the ops layer runs the matmul and the add; it declines
 * too where the matmul would not run in one piece in the module (a batch on the threads, slices,
 * blocks), for non-f32 operands and without the WASM kernel.
 */
export function linearKernel(
  x: KernelTensor,
  weight: KernelTensor,
  bias: KernelTensor,
  out: KernelTensor,
  wasm: WasmMatmul | null,
): boolean {
  if (wasm === null || [x, weight, bias, out].some((t) => t.dtype !== 'f32')) return false;
  const [n, k] = weight.shape as [number, number];
  const m = k === 0 ? 0 : shapeCount(x.shape) / k;
  const shape: MatmulShape = {
    batch: 1,
    batchA: 1,
    batchB: 1,
    m,
    k,
    n,
    transposeA: false,
    transposeB: true,
  };
  const o = outputValues(out);
  const done = wasm.runWithBias(
    readValues(x) as Float32Array,
    readValues(weight) as Float32Array,
    (readValues(bias) as Float32Array).subarray(0, n),
    o.values as Float32Array,
    shape,
  );
  if (done) o.commit();
  return done;
}
