import { matmulScratchBytes, matmulTile } from './matmul-wasm.generated.js';
import { align16, type MatmulShape, roundUp } from './matmul-layout.js';

/**
 * [Note: a batch of small products on the threads]
 * A batched call of products each under THREADED_MIN_MACS (the default GPT's attention: 64
 * products of 32 x 16 x 32 a call, 6 calls a step, each product too small to split by rows, so
 * the whole call ran on the calling thread, issue 49) splits between the threads by product: the
 * calling thread writes a table of each product's A and B addresses in the module's memory (the
 * contiguous call's raw operands, or the strided call's staged spans read through their
 * strides), and every thread claims chunks of whole products from the shared counter, packs each
 * product's A and B into panels of its own (not again when they come from where its previous
 * product's did: an operand the batch shares) and runs the gemm into that product's place in C
 * with its own edge tile. C stays in the module's memory until every product is done, then goes
 * out in batch order (added in that order when accumulating). One meeting of the threads a call,
 * where rows would need one per product and could not pay for it at this size; the workers are
 * woken when the call is planned, so their wake-up overlaps its copies. Each product is computed
 * by the same instructions in the same order on whichever thread claims it, so the bits are one
 * thread's. Taken from BATCH_MIN_MACS multiply-adds a call and below BATCH_MAX_MACS a product
 * (past that, splitting each product's rows loses nothing and needs no panels per thread), and
 * for products that rows would split (THREADED_MIN_MACS and up) only where there are two a
 * thread. The layout holds panels for every thread that may join, even with fewer products.
 * Measured (2-core EPYC, load about 1, tensor-core's README): a call of the default GPT's
 * attention 43-49 us against 55-65 on one thread, back to back; GPT-2's 48 products of 256 x 64 x
 * 256, 4.9-5.2 ms against 5.3 split by rows; the default GPT's step 0.973 of its time, GPT-2's
 * 0.965 (step pairs).
 */
/** Below this many multiply-adds in all, a batch of small products stays on the calling thread. */
export const BATCH_MIN_MACS = 2 ** 19;
/** From this many multiply-adds a product, a batch's products split by rows, each on its own. */
export const BATCH_MAX_MACS = 2 ** 24;

/** A batch call's layout in the module's memory ([Note: a batch of small products on the threads]). */
export interface BatchCall {
  /** Byte address of the table: per product, the byte addresses of its A and its B. */
  table: number;
  /** The calling thread's panels: thread t's are `region` bytes further per thread. */
  aPack: number;
  bPack: number;
  region: number;
  /** C: the products side by side, [batch, m, n]. */
  c: number;
  m: number;
  k: number;
  n: number;
  batch: number;
  /** The register tile's rows and columns (the panels' widths). */
  mr: number;
  nr: number;
  /** A's element (i, t) and B's (t, j), as `pack`'s (outer, inner) strides in elements. */
  aOuter: number;
  aInner: number;
  bOuter: number;
  bInner: number;
}

/** What a batch call needs of the matmul (`WasmMatmul`). */
export interface BatchTarget {
  /** The module's memory as floats from byte 0, grown to `bytes`; null past the budget. */
  reserve(bytes: number): Float32Array | null;
  /** Runs a call laid out by `batchLayout` on `threads` threads. */
  runBatch(call: BatchCall, threads: number): void;
}

const MR = matmulTile.rows;
const NR = matmulTile.columns;

/** Where a batch call's table, panels and C lie, and the first byte past them. */
export interface BatchLayout {
  table: number;
  aPack: number;
  bPack: number;
  region: number;
  c: number;
  end: number;
}

/**
 * A batch call's layout from byte `from` ([Note: a batch of small products on the threads] in
 * matmul-threads.ts): the table (two words a product), then one region of A and B panels per
 * thread, then C, the products side by side.
 */
export function batchLayout(
  from: number,
  batch: number,
  m: number,
  k: number,
  n: number,
  threads: number,
): BatchLayout {
  const table = align16(from);
  const aPack = align16(table + batch * 8);
  const aPanels = roundUp(m, MR) * k * 4;
  const region = aPanels + roundUp(n, NR) * k * 4;
  const c = aPack + threads * region;
  return { table, aPack, bPack: aPack + aPanels, region, c, end: c + batch * m * n * 4 };
}

/** The call of `layout`, its operands read through these (outer, inner) strides. */
export function batchCall(
  layout: BatchLayout,
  batch: number,
  m: number,
  k: number,
  n: number,
  a: readonly [number, number],
  b: readonly [number, number],
): BatchCall {
  const { table, aPack, bPack, region, c } = layout;
  return {
    table,
    aPack,
    bPack,
    region,
    c,
    m,
    k,
    n,
    batch,
    mr: MR,
    nr: NR,
    aOuter: a[0],
    aInner: a[1],
    bOuter: b[0],
    bInner: b[1],
  };
}

/**
 * C = A B for contiguous operands (`WasmMatmul.run`), split between `threads` threads by
 * product: the raw operands as one thread's call lays them out, then `batchLayout`. Returns
 * false, having done nothing, where that passes the module's budget (the caller runs the call as
 * one thread would).
 */
export function runBatchOnThreads(
  target: BatchTarget,
  a: Float32Array,
  b: Float32Array,
  out: Float32Array,
  s: MatmulShape,
  threads: number,
): boolean {
  const { batch, batchA, batchB, m, k, n, transposeA, transposeB } = s;
  const aRaw = matmulScratchBytes;
  const bRaw = aRaw + align16(batchA * m * k * 4);
  const layout = batchLayout(bRaw + align16(batchB * k * n * 4), batch, m, k, n, threads);
  const heap = target.reserve(layout.end);
  if (heap === null) return false;
  heap.set(a.subarray(0, batchA * m * k), aRaw / 4);
  heap.set(b.subarray(0, batchB * k * n), bRaw / 4);
  const words = new Int32Array(heap.buffer, layout.table, 2 * batch);
  for (let p = 0; p < batch; p++) {
    words[2 * p] = aRaw + (batchA === 1 ? 0 : p) * m * k * 4;
    words[2 * p + 1] = bRaw + (batchB === 1 ? 0 : p) * k * n * 4;
  }
  const aStrides = transposeA ? ([1, m] as const) : ([k, 1] as const);
  const bStrides = transposeB ? ([k, 1] as const) : ([1, n] as const);
  target.runBatch(batchCall(layout, batch, m, k, n, aStrides, bStrides), threads);
  out.set(heap.subarray(layout.c / 4, layout.c / 4 + batch * m * n));
  return true;
}
