import { matmulKBlock, matmulScratchBytes, matmulTile } from './matmul-wasm.generated.js';
import { align16, copyRuns, type MatmulShape, roundUp } from './matmul-layout.js';
import type { PackJob } from './matmul-threads.js';

/**
 * [Note: the WASM matmul in slices of k]
 * A call past the module's memory budget whose result is small beside its operands (GPT-2's
 * output layer's gradient of its input: C is 1024 x 768, 3 MB, from A 1024 x 50304 and B
 * 50304 x 768, 206 and 154 MB) runs over slices of k instead of blocks of C ([Note: the WASM
 * matmul in blocks]): each slice's columns of A and rows of B are copied in and packed, and the
 * gemm adds their products to C, which stays in the module's memory until the last slice. Every
 * element of A and B is copied and packed once; blocks of C's columns would pack the whole of A
 * once a block (five times for that call: 1.4 s of GPT-2's 11 s step against 0.9 s for the
 * forward product of the same size, issue 49). A slice is a whole number of the gemm's k blocks
 * (KC, 256), and every slice after the first adds its first block's sums to C as a later block of
 * one call would (the gemm's `acc`): the same sums in the same order, so the bits of one call.
 * It is taken where C takes at most half the budget and a slice holds at least MIN_BLOCKS k
 * blocks; other calls run in blocks of C.
 */

/** What a slice needs of the matmul (`WasmMatmul`): its memory, its packing and its gemm. */
export interface SliceTarget {
  /** The module's memory as floats from byte 0, grown to `bytes`; null past the budget. */
  reserve(bytes: number): Float32Array | null;
  packAll(jobs: readonly PackJob[], macs: number): void;
  gemm(ap: number, bp: number, c: number, m: number, k: number, n: number, acc: boolean): void;
}

const MR = matmulTile.rows;
const NR = matmulTile.columns;
const KC = matmulKBlock;
/** Fewer k blocks a slice than this, and the call runs in blocks of C. */
const MIN_BLOCKS = 4;

/** The k steps a slice takes within `budget` bytes, or 0 where slices of k do not pay. */
export function sliceOfK(s: MatmulShape, budget: number): number {
  const cBytes = align16(s.m * s.n * 4);
  if (cBytes > budget / 2) return 0;
  // A's and B's slices raw and packed, per k step, and the alignment of each region.
  const perStep = 4 * (s.m + roundUp(s.m, MR) + s.n + roundUp(s.n, NR));
  const kc = Math.floor((budget - matmulScratchBytes - cBytes - 64) / perStep / KC) * KC;
  return kc >= MIN_BLOCKS * KC && kc < s.k ? kc : 0;
}

/**
 * C = A B over slices of `kc` k steps (a multiple of KC, from `sliceOfK`): see [Note: the WASM
 * matmul in slices of k].
 */
export function runInSlicesOfK(
  target: SliceTarget,
  a: Float32Array,
  b: Float32Array,
  out: Float32Array,
  s: MatmulShape,
  kc: number,
): void {
  const { batch, batchA, batchB, m, k, n, transposeA, transposeB } = s;
  const aRaw = matmulScratchBytes;
  const aPack = aRaw + align16(m * kc * 4);
  const bRaw = aPack + roundUp(m, MR) * kc * 4;
  const bPack = bRaw + align16(kc * n * 4);
  const c = bPack + roundUp(n, NR) * kc * 4;
  const heap = target.reserve(c + m * n * 4);
  if (heap === null) throw new RangeError(`a slice of ${kc} k steps passes the budget`);
  for (let p = 0; p < batch; p++) {
    const aBase = (batchA === 1 ? 0 : p) * m * k;
    const bBase = (batchB === 1 ? 0 : p) * k * n;
    for (let k0 = 0; k0 < k; k0 += kc) {
      const ks = Math.min(kc, k - k0);
      // A's columns [k0, k0 + ks): a run per row as stored [m, k], one run as stored [k, m].
      if (transposeA) heap.set(a.subarray(aBase + k0 * m, aBase + (k0 + ks) * m), aRaw / 4);
      else copyRuns(heap, aRaw / 4, a, aBase + k0, m, k, ks);
      // B's rows [k0, k0 + ks): one run as stored [k, n], a run per column as stored [n, k].
      if (!transposeB) heap.set(b.subarray(bBase + k0 * n, bBase + (k0 + ks) * n), bRaw / 4);
      else copyRuns(heap, bRaw / 4, b, bBase + k0, n, k, ks);
      // Element (i, t) of A's slice and (t, j) of B's, as (outer, inner) strides in elements.
      const [aOuter, aInner] = transposeA ? [1, m] : [ks, 1];
      const [bOuter, bInner] = transposeB ? [ks, 1] : [1, n];
      target.packAll(
        [
          {
            src: aRaw,
            dst: aPack,
            outer: m,
            inner: ks,
            width: MR,
            strideOuter: aOuter,
            strideInner: aInner,
          },
          {
            src: bRaw,
            dst: bPack,
            outer: n,
            inner: ks,
            width: NR,
            strideOuter: bOuter,
            strideInner: bInner,
          },
        ],
        m * ks * n,
      );
      target.gemm(aPack, bPack, c, m, ks, n, k0 > 0);
    }
    out.set(heap.subarray(c / 4, c / 4 + m * n), p * m * n);
  }
}
