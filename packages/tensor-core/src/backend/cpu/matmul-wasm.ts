import { matmulKBlock, matmulScratchBytes, matmulTile } from './matmul-wasm.generated.js';
import type { GeluGradMap, GeluMap, Gemm, MatmulThreads, Pack, PackJob } from './matmul-threads.js';
import {
  ATTENTION_WORDS,
  type AttentionBackward,
  type AttentionForward,
  attentionChunks,
} from './attention-chunks.js';
import { align16, type MatmulShape, roundUp } from './matmul-layout.js';
import { type BatchCall, runBatchOnThreads } from './matmul-wasm-batch.js';
import { runInBlocks } from './matmul-wasm-blocks.js';
import { runInSlicesOfK, sliceOfK } from './matmul-wasm-slices.js';

export type { MatmulShape } from './matmul-layout.js';

/**
 * [Note: the WASM SIMD matmul]
 * The CPU backend's f32 matmul runs as WebAssembly with 128-bit SIMD, from hand-written WAT that
 * generate-matmul-wasm.mjs writes and assembles (matmul.wat beside it; the bytes are checked in as
 * matmul-wasm.generated.ts, so users need no toolchain), as collectives' reduce kernels are built.
 *
 * - Packing. Both operands are copied into the module's memory, then `pack` lays A out as panels
 *   of 4 rows ([k][4] floats each) and B as panels of 8 columns ([k][8]), zero-padded at the edges.
 *   Packing reads through element strides, so transposed operands cost nothing extra, and the hot
 *   loop reads both panels sequentially whatever the layout. Full panels are copied with SIMD:
 *   16-byte copies where a panel's lanes are contiguous (B as stored, A transposed; 16 lanes, so
 *   4 or 2 panels, at once, reading each source line once), 4x4 transposes
 *   by shuffles where its k steps are (A as stored, B transposed); edges element by element (the
 *   WAT is matmul-pack-wat.mjs). A batch of 1 broadcasts: it is packed once. A call large enough
 *   to split packs on every thread ([Note: matmul threads]).
 * - The register tile. `gemm` computes C in 4x8 tiles held in 8 f32x4 locals (V8 keeps them in xmm
 *   registers): per k step, two vector loads of B, four splat loads of A and 8 multiplies and adds.
 *   The k loop is not unrolled in the WAT: TurboFan schedules a trip's loads before its
 *   arithmetic, so 4 steps unrolled made 8 B vectors and 16 splats live at once and spilled the
 *   accumulators to the stack in the hot loop (11-20 GFLOP/s on one Zen 3 core, depending on the
 *   process, against 30-31 without the unroll; V8 unrolls the small loop itself, without spills).
 *   The same hoisting sets the tile: 8 accumulators, 2 B vectors, 4 splats and a product fill the
 *   15 xmm registers V8 allocates, so 5x8 and 6x8 spill (9 and 21 GFLOP/s), 2x16 fits and runs
 *   as fast as 4x8, and 8x8 with A loaded once per 4 rows and splatted by shuffles ran at 24.
 *   `bench/matmul-wasm-tiles.ts` measures these variants. The fused module (no product register)
 *   keeps 4x8 too: a 3x12 fused tile (9 accumulators) was built and measured on the Xeon with
 *   AVX-512, 2026-11-27 (`bench/matmul-threads-pair.ts` and `bench/step-pair.ts` with `auto`, load
 *   1): 1.02-1.12x the 4x8's GFLOP/s on n = 1024 and GPT-2's layers at 2 threads, but the default
 *   GPT step 1.13x slower (26.8 against 23.7 ms), since widths of 64 and 256 leave edge tiles that
 *   12 does not divide (n = 64, gemm alone: 35.1 against 40.4 GFLOP/s) and A's 3-row panels pack
 *   element by element. Edge tiles go through a 4x8 scratch tile, one per thread, in the first
 *   bytes of memory.
 * - Cache blocks. k runs in blocks of 256 and rows in blocks of 64: one tile's slices of an A panel
 *   (4 KiB) and a B panel (8 KiB) stay in L1, and a 64x256 block of A (64 KiB) stays in L2 while
 *   every B panel passes over it.
 * - Numerics. Each element is summed in f32 from f32 products by blocks of 256 k steps, as BLAS
 *   sums (so PyTorch's matmul): each block in k order from zero, (((0 + a0 b0) + a1 b1) + ...), and
 *   the blocks' sums added to C in k order. A running sum over all of k, as the kernel summed
 *   before, carries an error that grows with k: over GPT-2's 50304-token vocabulary (lm_head's
 *   backward) it was 30-45x pairwise summation's, against 4x now (`summation-error.test.ts`); it
 *   was the one long f32 running sum among the CPU kernels when issue 30 found a GPT-2 bias 110x
 *   further from float64 than PyTorch's after 3 AdamW steps. The blocks are fixed by k alone, so every bit of the result is independent
 *   of the row blocks, the tile and the thread count (threads split C's rows, never k: [Note:
 *   matmul threads]). Where the engine validates relaxed
 *   SIMD (Chrome, Node 22; Node 20 behind V8's --experimental-wasm-relaxed-simd, which asking
 *   for it sets: [Note: relaxed FMA, chosen once per job]) and `createCpuBackend({ matmulFma: 'auto' })` asks for it, the multiply-add is
 *   `f32x4.relaxed_madd`, which rounds once where the engine fuses it (x64 with FMA3, arm64) and
 *   twice elsewhere: still the same on every run and thread count of one machine, but two engines
 *   can differ in the last bits. The default (`'off'`) keeps the unfused module, whose results are
 *   the same on every engine: a browser tab's rank and the Node ranks of its job agree, and
 *   training is reproducible across machines. The TypeScript kernel sums in f64 and rounds once;
 *   the kernels agree to the f32 tolerance, and PyTorch, tfjs and onnxruntime also sum f32 in f32.
 * - Memory. Each backend has its own instance; its memory grows to the largest call's operands,
 *   packed panels and result, and is kept for reuse (scratch, like the TypeScript kernel's copies,
 *   so not in `memoryStats`).
 * - Variants. Four modules from the one generator: plain or relaxed SIMD, each with its own memory
 *   or importing a shared one (for threads).
 * - Fallback. Where `WebAssembly.validate` rejects the module (no SIMD) or the operands would not fit
 *   in a 2 GiB memory, the TypeScript kernel runs; f16, bf16 and f64 always take it.
 */

/** The kernel's register tile: rows of A and columns of B per panel. */
export const MR = matmulTile.rows;
const NR = matmulTile.columns;
/** The gemm's k block: each block's sums are added to C in turn ([Note: the WASM SIMD matmul]). */
const KC = matmulKBlock;
const SCRATCH_BYTES = matmulScratchBytes;
/** One thread's edge tile: threads at most is SCRATCH_BYTES / TILE_BYTES. */
export const TILE_BYTES = MR * NR * 4;
export const MAX_THREADS = SCRATCH_BYTES / TILE_BYTES;
/** Past this many bytes of operands the TypeScript kernel runs (i32 offsets, V8's memory cap). */
const MAX_BYTES = 2 ** 31 - 2 ** 16;
const PAGE = 65536;
/** The default budget of the module's memory ([Note: the WASM matmul in blocks]). */
const MAX_SCRATCH_BYTES = 128 * 2 ** 20;

/** What an instance of the module exports (the bench and the WAT tests call it directly). */
export interface MatmulExports {
  readonly memory: WebAssembly.Memory;
  readonly pack: Pack;
  readonly gemm: Gemm;
  /** The kernels module's GELU maps ([Note: GELU on the matmul's threads] in gelu-threads.ts). */
  readonly gelu: GeluMap;
  readonly gelu_grad: GeluGradMap;
  /** Attention's heads in one call each way ([Note: attention's heads in one call]). */
  readonly attention_forward: AttentionForward;
  readonly attention_backward: AttentionBackward;
}

/**
 * [Note: a shared B folds the batch into rows]
 * A batch of products with one B (a linear layer's input [B, T, C] times its weight, and the
 * gradient of that input) is one product of A's B x T rows with B, when A is stored row-major
 * ([batch, m, k], not transposed) as C is: the same elements with the same sums in the same
 * order, so the same bits, and B is packed once, not once per batch element (GPT-2's output
 * layer: its 154 MB weight packed four times, in blocks, at B4), and the threads split B x T rows.
 */
export function foldBatch(s: MatmulShape): MatmulShape {
  if (s.batch === 1 || s.batchB !== 1 || s.batchA !== s.batch || s.transposeA) return s;
  return { ...s, batch: 1, batchA: 1, m: s.batch * s.m };
}

/** Writes `rows` copies of `row` from float `at` of `heap`: one row, then doubling copies. */
function fillRows(heap: Float32Array, at: number, row: Float32Array, rows: number): void {
  const n = row.length;
  heap.set(row, at);
  for (let filled = n; filled < rows * n; filled *= 2) {
    heap.copyWithin(at + filled, at, at + Math.min(filled, rows * n - filled));
  }
}

function packJob(
  src: number,
  dst: number,
  outer: number,
  inner: number,
  width: number,
  strideOuter: number,
  strideInner: number,
): PackJob {
  return { src, dst, outer, inner, width, strideOuter, strideInner };
}

/** The WASM SIMD f32 matmul over one module instance, whose memory only grows. */
export class WasmMatmul {
  constructor(
    private readonly exports: MatmulExports,
    /** Whether the module multiplies and adds with relaxed SIMD's fused multiply-add. */
    readonly fma: boolean,
    private readonly memory: WebAssembly.Memory,
    private readonly threads: MatmulThreads | null = null,
    /** The most the module's memory grows to: see [Note: the WASM matmul in blocks]. */
    private readonly maxScratchBytes = MAX_SCRATCH_BYTES,
  ) {}

  /** Bytes of the module's memory: operands, panels and results of the largest call so far. */
  get scratchBytes(): number {
    return this.memory.buffer.byteLength;
  }

  /** Starts the worker threads if they have not started; resolves to the threads in use. */
  startThreads(): Promise<number> {
    return this.threads?.start() ?? Promise.resolve(1);
  }

  /** Threads a large call uses now (1 until the workers run: [Note: matmul threads]). */
  get threadsInUse(): number {
    return this.threads?.inUse ?? 1;
  }

  /** Stops the worker threads. */
  dispose(): void {
    this.threads?.stop();
  }

  /** The bytes of module memory `shape` needs, or Infinity past what the module can address. */
  static bytesFor(s: MatmulShape): number {
    const bytes =
      SCRATCH_BYTES +
      align16(s.batchA * s.m * s.k * 4) +
      align16(s.batchB * s.k * s.n * 4) +
      roundUp(s.m, MR) * s.k * 4 +
      roundUp(s.n, NR) * s.k * 4 +
      align16(s.batch * s.m * s.n * 4);
    return bytes <= MAX_BYTES ? bytes : Number.POSITIVE_INFINITY;
  }

  /** Whether `run` takes this shape (it fits, and no dimension is empty). */
  static accepts(s: MatmulShape): boolean {
    return s.m > 0 && s.n > 0 && s.k > 0 && Number.isFinite(WasmMatmul.bytesFor(s));
  }

  /** Write A B into `out` (`batch * m * n` floats). The caller checks `accepts(shape)` first. */
  run(a: Float32Array, b: Float32Array, out: Float32Array, shape: MatmulShape): void {
    const s = foldBatch(shape);
    const need = WasmMatmul.bytesFor(s);
    if (need > this.maxScratchBytes) {
      const kc = sliceOfK(s, this.maxScratchBytes);
      if (kc > 0) runInSlicesOfK(this, a, b, out, s, kc);
      else runInBlocks(this, a, b, out, s, this.maxScratchBytes);
      return;
    }
    const byBatch = this.threads?.batchThreads(s.batch, s.m * s.k * s.n) ?? 1;
    if (byBatch > 1 && runBatchOnThreads(this, a, b, out, s, byBatch)) return;
    this.runWhole(a, b, out, s, need, null);
  }

  /**
   * Write A B + bias into `out`, the bias (`n` floats) added to every row, with the bits of `run`
   * and then a broadcast add ([Note: the bias in the gemm] in matmul.ts): only for one product
   * (`batch` 1) whose k fits in one of the gemm's k blocks and whose operands fit in one piece.
   * False, having done nothing, for any other.
   */
  runWithBias(
    a: Float32Array,
    b: Float32Array,
    bias: Float32Array,
    out: Float32Array,
    s: MatmulShape,
  ): boolean {
    const need = WasmMatmul.bytesFor(s);
    if (s.batch !== 1 || s.k > KC || need > this.maxScratchBytes || !WasmMatmul.accepts(s)) {
      return false;
    }
    this.runWhole(a, b, out, s, need, bias);
    return true;
  }

  /** One call in one piece; with a bias, C starts as its rows and the gemm adds to them. */
  private runWhole(
    a: Float32Array,
    b: Float32Array,
    out: Float32Array,
    s: MatmulShape,
    need: number,
    bias: Float32Array | null,
  ): void {
    const { batch, batchA, batchB, m, k, n } = s;
    this.threads?.wake(m, m * k * n);
    this.grow(need);
    const aRaw = SCRATCH_BYTES;
    const bRaw = aRaw + align16(batchA * m * k * 4);
    const aPack = bRaw + align16(batchB * k * n * 4);
    const bPack = aPack + roundUp(m, MR) * k * 4;
    const c = bPack + roundUp(n, NR) * k * 4;
    const buffer = this.memory.buffer;
    new Float32Array(buffer, aRaw, batchA * m * k).set(a.subarray(0, batchA * m * k));
    new Float32Array(buffer, bRaw, batchB * k * n).set(b.subarray(0, batchB * k * n));
    // Element (i, t) of A and (t, j) of B, as (outer, inner) strides in elements.
    const [aOuter, aInner] = s.transposeA ? [1, m] : [k, 1];
    const [bOuter, bInner] = s.transposeB ? [k, 1] : [1, n];
    const macs = m * k * n;
    for (let p = 0; p < batch; p++) {
      const jobs: PackJob[] = [];
      if (p === 0 || batchA !== 1) {
        jobs.push(packJob(aRaw + p * m * k * 4, aPack, m, k, MR, aOuter, aInner));
      }
      if (p === 0 || batchB !== 1) {
        jobs.push(packJob(bRaw + p * k * n * 4, bPack, n, k, NR, bOuter, bInner));
      }
      this.packAll(jobs, macs);
      if (bias !== null) fillRows(new Float32Array(buffer), c / 4, bias, m);
      this.gemm(aPack, bPack, c + p * m * n * 4, m, k, n, bias !== null);
    }
    out.set(new Float32Array(buffer, c, batch * m * n));
  }

  /**
   * Threads a batch of `batch` products of `macs` multiply-adds would split between by product
   * now: 1 where it would not ([Note: a batch of small products on the threads]).
   */
  batchThreads(batch: number, macs: number): number {
    return this.threads?.batchThreads(batch, macs) ?? 1;
  }

  /** Runs a batch call laid out by `batchLayout` (matmul-wasm-batch.ts) on `threads` threads. */
  runBatch(call: BatchCall, threads: number): void {
    const { gemm, pack } = this.exports;
    this.threads!.batch(gemm, pack, new Int32Array(this.memory.buffer), call, threads);
  }

  /** Threads an attention call would use now: see `attentionThreads` in matmul-threads.ts. */
  attentionThreads(pairs: number, macs: number): number {
    return this.threads?.attentionThreads(pairs, macs) ?? 1;
  }

  /**
   * Runs an attention call laid out by attention-kernel.ts (its words: attention-chunks.ts) on
   * `threads` threads (from `attentionThreads`), or all its pairs on this one.
   */
  attention(words: readonly number[], threads: number): void {
    const { attention_forward: forward, attention_backward: backward } = this.exports;
    const buffer = this.memory.buffer;
    if (threads > 1 && this.threads !== null) {
      this.threads.attention(forward, backward, words, buffer);
      return;
    }
    // The words, then the chunk counter.
    const ctl = Int32Array.from([...words, 0]);
    attentionChunks(forward, backward, ctl, buffer, 0, ATTENTION_WORDS, 0);
  }

  /** Threads a map of `n` elements would use now: see `geluOnThreads` (gelu-threads.ts). */
  mapThreads(n: number): number {
    return this.threads?.mapThreads(n) ?? 1;
  }

  /**
   * o = gelu(x), or dy gelu'(x) where `dy` is not null, over `n` elements at those byte
   * addresses (laid out by the caller through `reserve`), on the threads in chunks of `chunk`.
   */
  map(x: number, dy: number | null, o: number, n: number, chunk: number): void {
    const { gelu, gelu_grad } = this.exports;
    if (this.threads === null) {
      if (dy === null) gelu(x, o, n);
      else gelu_grad(x, dy, o, n);
    } else this.threads.map(gelu, gelu_grad, x, dy, o, n, chunk);
  }

  /**
   * For callers that lay out the module's memory themselves (matmul-strided.ts): grows it to at
   * least `bytes` and returns it as floats from byte 0, or null past `maxScratchBytes`. Bytes
   * below `matmulScratchBytes` are the kernel's edge tiles; the rest is the caller's until its
   * next call.
   */
  reserve(bytes: number): Float32Array | null {
    if (bytes > this.maxScratchBytes || bytes > MAX_BYTES) return null;
    return this.grow(bytes);
  }

  /**
   * The module's memory as floats from byte 0, grown to at least `bytes` whatever the budget (a
   * call in blocks whose one row and one column block pass it: [Note: the WASM matmul in blocks]).
   */
  grow(bytes: number): Float32Array {
    const memory = this.memory;
    if (memory.buffer.byteLength < bytes) {
      memory.grow(Math.ceil((bytes - memory.buffer.byteLength) / PAGE));
    }
    return new Float32Array(memory.buffer);
  }

  /** The module's `pack` (byte addresses, strides in elements): see [Note: the WASM SIMD matmul]. */
  pack(
    src: number,
    dst: number,
    outer: number,
    inner: number,
    width: number,
    strideOuter: number,
    strideInner: number,
  ): void {
    this.exports.pack(src, dst, outer, inner, width, strideOuter, strideInner);
  }

  /**
   * Packs the jobs' operands, on the threads when the gemm they feed (`macs` multiply-adds)
   * splits: [Note: matmul threads]. The panels' bits do not depend on how they are split.
   */
  packAll(jobs: readonly PackJob[], macs: number): void {
    const { pack } = this.exports;
    if (this.threads !== null) this.threads.pack(pack, jobs, macs);
    else
      for (const j of jobs)
        pack(j.src, j.dst, j.outer, j.inner, j.width, j.strideOuter, j.strideInner);
  }

  /**
   * One gemm, split between the threads from THREADED_MIN_MACS multiply-adds; with `acc` its
   * products are added to C ([Note: the WASM matmul in slices of k]).
   */
  gemm(ap: number, bp: number, c: number, m: number, k: number, n: number, acc = false): void {
    const { gemm } = this.exports;
    if (this.threads === null) gemm(ap, bp, c, m, k, n, 0, acc ? 1 : 0);
    else this.threads.gemm(gemm, ap, bp, c, m, k, n, acc);
  }
}
