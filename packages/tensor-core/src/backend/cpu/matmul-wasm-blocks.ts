import { matmulScratchBytes, matmulTile } from './matmul-wasm.generated.js';
import { align16, copyRuns, type MatmulShape, roundUp } from './matmul-layout.js';
import type { PackJob } from './matmul-threads.js';
import type { SliceTarget } from './matmul-wasm-slices.js';

/** What a call in blocks needs of the matmul (`WasmMatmul`): a slice's, and memory past the budget. */
export interface BlockTarget extends SliceTarget {
  /** The module's memory as floats from byte 0, grown to at least `bytes` whatever the budget. */
  grow(bytes: number): Float32Array;
}

const MR = matmulTile.rows;
const NR = matmulTile.columns;
const SCRATCH_BYTES = matmulScratchBytes;

/** A pack of `outer` x `inner` from `src` into panels `width` wide at `dst`, strides (outer, inner). */
function job(
  src: number,
  dst: number,
  outer: number,
  inner: number,
  width: number,
  [strideOuter, strideInner]: number[],
): PackJob {
  return { src, dst, outer, inner, width, strideOuter: strideOuter!, strideInner: strideInner! };
}

/**
 * [Note: the WASM matmul in blocks]
 * A call whose operands, panels and result would pass `maxScratchBytes` (128 MiB), and whose
 * result is too large for slices of k ([Note: the WASM matmul in slices of k]), runs in blocks
 * of C: columns in blocks as wide as half the budget holds B's panels for, rows in blocks that
 * fill the rest, each block's A rows and B columns copied in and packed, its result copied out.
 * Every element of C is still one sum over all of k in k order, so the bits are those of one
 * call ([Note: the WASM SIMD matmul]); the module's memory, which never shrinks, stays at the
 * budget instead of growing to the largest call's operands (GPT-2's output layer: 720 MB for
 * the gradient of its input, which then stayed with every rank). The cost is repacking: A once
 * per column block (GPT-2's largest call, 1024 x 50304 x 768, packs A five times).
 */
export function runInBlocks(
  target: BlockTarget,
  a: Float32Array,
  b: Float32Array,
  out: Float32Array,
  s: MatmulShape,
  maxScratchBytes: number,
): void {
  const { batch, batchA, batchB, m, k, n, transposeA, transposeB } = s;
  const budget = maxScratchBytes - SCRATCH_BYTES;
  // Columns: as many as half the budget holds (raw and packed), a multiple of the tile's.
  const columns = Math.min(
    roundUp(n, NR),
    Math.max(NR, Math.floor(budget / 2 / (8 * k) / NR) * NR),
  );
  // Rows: what is left, beside their slice of C.
  const left = budget - columns * k * 8;
  const rows = Math.min(
    roundUp(m, MR),
    Math.max(MR, Math.floor(left / (8 * k + 4 * columns) / MR) * MR),
  );
  const aRaw = SCRATCH_BYTES;
  const aPack = aRaw + align16(rows * k * 4);
  const bRaw = aPack + rows * k * 4;
  const bPack = bRaw + align16(columns * k * 4);
  const c = bPack + columns * k * 4;
  const need = c + rows * columns * 4;
  const heap = target.grow(need);
  for (let p = 0; p < batch; p++) {
    const aBase = (batchA === 1 ? 0 : p) * m * k;
    const bBase = (batchB === 1 ? 0 : p) * k * n;
    for (let j0 = 0; j0 < n; j0 += columns) {
      const nc = Math.min(columns, n - j0);
      // B's columns [j0, j0 + nc): stored [n, k] they are one run, else a run per row of k.
      if (transposeB) heap.set(b.subarray(bBase + j0 * k, bBase + (j0 + nc) * k), bRaw / 4);
      else copyRuns(heap, bRaw / 4, b, bBase + j0, k, n, nc);
      const macs = Math.min(rows, m) * k * nc;
      target.packAll([job(bRaw, bPack, nc, k, NR, transposeB ? [k, 1] : [1, nc])], macs);
      for (let i0 = 0; i0 < m; i0 += rows) {
        const mc = Math.min(rows, m - i0);
        if (!transposeA) heap.set(a.subarray(aBase + i0 * k, aBase + (i0 + mc) * k), aRaw / 4);
        else copyRuns(heap, aRaw / 4, a, aBase + i0, k, m, mc);
        target.packAll([job(aRaw, aPack, mc, k, MR, transposeA ? [1, mc] : [k, 1])], mc * k * nc);
        target.gemm(aPack, bPack, c, mc, k, nc, false);
        for (let i = 0; i < mc; i++) {
          const row = c / 4 + i * nc;
          out.set(heap.subarray(row, row + nc), (p * m + i0 + i) * n + j0);
        }
      }
    }
  }
}
