import { BATCH_MAX_MACS, BATCH_MIN_MACS, type BatchCall } from './matmul-wasm-batch.js';
import { MatmulPool } from './matmul-pool.js';
import {
  type AttentionBackward,
  type AttentionForward,
  attentionChunks,
} from './attention-chunks.js';
import {
  ARGS,
  ATTENDED,
  ATTENTION,
  BATCH,
  BATCHED,
  batchChunks,
  GELU_GRAD_MAP,
  GELU_MAP,
  GEMM,
  type GeluGradMap,
  type GeluMap,
  type Gemm,
  KIND,
  MAP,
  MAPPED,
  mapChunks,
  NEXT,
  PACK,
  PACK_WORDS,
  PACKED,
  type Pack,
  packChunks,
} from './matmul-worker.js';

export type { GeluGradMap, GeluMap, Gemm, Pack } from './matmul-worker.js';

/**
 * [Note: matmul threads]
 *
 * The WASM matmul runs on several threads where the engine can share memory between them (Node's
 * worker threads; Web Workers in a cross-origin-isolated page, where `SharedArrayBuffer` exists):
 * every worker instantiates the same module over the same shared
 * `WebAssembly.Memory`, and a call splits C's rows between the calling thread and the workers, in
 * chunks of whole register tiles (up to 64 rows, at least 4 chunks a thread) that each thread
 * claims in turn from a shared counter until none is left, so a thread the operating system
 * runs less (a shared machine) computes fewer chunks instead of holding up the call with a fixed
 * half (measured: 1.02-1.23x fixed halves at n = 256-1024 when the process got 1.5-1.8 cores,
 * tensor-core's README). The split is by output tiles, never along k: every
 * element of C is computed by the same instructions in the same order whatever the thread count,
 * so results are identical bit for bit across thread counts (the tests check it).
 *
 * Packing splits the same way (issue 49: with the panels packed on the calling thread alone, 2
 * threads made n = 1024 only 1.54x one): a call's A and B panels are one list of chunks of whole
 * panels, claimed from the same counter, each chunk a `pack` of its rows, which writes the bytes
 * one `pack` of the whole operand writes there. The copies into the module's memory stay on the
 * calling thread: the operands' ArrayBuffers are not shared with the workers.
 *
 * The calling thread publishes a call in a small shared control block (operands' addresses, the
 * chunk size and the chunk counter), bumps a generation counter and wakes the workers with
 * `Atomics.notify`, claims and computes chunks until none is left, then waits (polling, then in
 * `Atomics.wait`) until every worker that joined the call has counted itself done ([Note:
 * joining a call]: a worker that has not woken by then is not waited for; a page's main thread
 * may not block, so there it polls on the count, for at most the chunks in flight); the kernel API
 * stays synchronous. Each
 * thread has its own edge tile in the scratch bytes. A worker whose chunk throws writes what it
 * threw into a shared report block; the calling thread throws it, naming the worker and the call
 * (`matmul-worker.ts` holds the worker's loop and the control block's layout, `matmul-pool.ts` the
 * pool's workers and the meeting, this file the calls and when each splits).
 *
 * Workers start at the first call large enough to use them (or `startMatmulThreads()`), and each
 * counts itself in the control block when it enters its loop; a call splits only once all have
 * (a page's worker cannot start while the page's main thread spins in a call). Until then (and
 * for gemms under THREADED_MIN_MACS, where a meeting of the threads costs more than it saves)
 * the calling thread does all rows. The count is read from shared memory at each call, never from the workers' online events,
 * which reach this thread only when its event loop turns: a training step is synchronous kernel
 * calls between awaits of promises, and until issue 31's profile found it, the trainer's matmuls
 * never split (a GPT-2 step at 42.6 GFLOP/s, one core's worth, against 89-90 with both threads).
 * Where Node has `process.getBuiltinModule` (20.16 on) the workers are even spawned inside the
 * first large call, so its next calls split. A process takes its share of the cores when a
 * launcher started several on the machine ([Note: threads per process] in `#platform`).
 * Workers are `unref`ed in Node (they never keep a process alive) and stopped by `dispose`.
 * `#platform` starts them (`spawnWorker`: a `node:worker_threads` Worker from source, or a Web
 * Worker from a Blob URL whose first message is the worker's data); a page that is not
 * cross-origin isolated has no shared memory, so there the matmul runs on one thread.
 */

/** Control block words. */
/** One `pack` call ([Note: the WASM SIMD matmul]): byte addresses, strides in elements. */
export interface PackJob {
  src: number;
  dst: number;
  outer: number;
  inner: number;
  width: number;
  strideOuter: number;
  strideInner: number;
}

/** Rows per chunk at most (the gemm's row block), and chunks per thread at least. */
const CHUNK_ROWS = 64;
const CHUNKS_PER_THREAD = 4;
/**
 * Below this many multiply-adds in one gemm (one batch element's product, or one block's) it runs
 * on the calling thread alone: 2^21, some 70 us on one thread here. The default GPT's products
 * (512 x 64 x 64 and up) split by rows, its attention's (32 x 16 x 32 a head) do not: split so,
 * each product of a batch would be its own meeting of the threads, which costs 1-50 us ([Note:
 * joining a call]); a batch of them splits by product instead ([Note: a batch of small products
 * on the threads]). Until issue 49's profile of the default step the bar was 2^24 for a
 * whole call, every batch element counted, and that step's matmuls ran on one thread (48 GFLOP/s
 * of a 137 GFLOP/s two-thread ceiling).
 */
export const THREADED_MIN_MACS = 2 ** 21;

/**
 * Packs of fewer floats (A's and B's together) than this stay on the calling thread: 2^18 (1 MiB),
 * some 0.1-0.2 ms of packing, against a meeting of the threads that costs tens of microseconds on
 * an idle machine and more where the workers wait to be scheduled. GPT-2's attention products
 * (48 a call, 256 x 64 panels each) pack alone; n = 1024 and its linear layers split.
 */
export const PACK_MIN_FLOATS = 2 ** 18;

/**
 * Maps (GELU and its gradient) of fewer elements than this stay on one thread: 2^15, some
 * 80-200 us of GELU or its gradient on one thread of this VM, several meetings' worth ([Note:
 * GELU on the matmul's threads] in gelu-threads.ts).
 */
export const MAP_MIN_ELEMENTS = 2 ** 15;

/** The WASM matmul's calls on its pool of threads: what each splits into, and when it splits. */
export class MatmulThreads extends MatmulPool {
  /**
   * @param threads threads in all, the caller's included, or `'auto'`: one per core, on the main
   *   thread only (ranks in worker threads already fill the cores), at most `maxThreads`.
   * @param rowMultiple rows per split are a multiple of this (the register tile's rows).
   * @param tileBytes bytes of one thread's edge tile; thread i's is at i * tileBytes.
   */
  constructor(
    module: WebAssembly.Module,
    memory: WebAssembly.Memory,
    threads: number | 'auto',
    maxThreads: number,
    private readonly rowMultiple: number,
    tileBytes: number,
  ) {
    super(module, memory, threads, maxThreads, tileBytes);
  }

  /** Wakes the workers ahead of a gemm that will split (`m` rows, `macs` multiply-adds). */
  wake(m: number, macs: number): void {
    if (this.threadsFor(m, macs) > 1) this.wakeWorkers();
  }

  /** Threads a gemm of `m` rows and `macs` multiply-adds would use now. */
  threadsFor(m: number, macs: number): number {
    if (macs < THREADED_MIN_MACS) return 1;
    return Math.min(this.threadsNow(), Math.ceil(m / this.rowMultiple));
  }

  /**
   * Threads a batch of `batch` products of `macs` multiply-adds each would use now ([Note: a batch
   * of small products on the threads]): 1 where it does not split that way.
   */
  batchThreads(batch: number, macs: number): number {
    if (batch < 2 || macs >= BATCH_MAX_MACS || batch * macs < BATCH_MIN_MACS) return 1;
    const threads = this.threadsNow();
    if (threads === 1) return 1;
    // Products that split by rows and are too few to give every thread two: by rows.
    if (macs >= THREADED_MIN_MACS && batch < 2 * threads) return 1;
    // Every thread that may join has its panels in the call's layout, even with fewer products.
    // The workers are woken now, so that their wake-up overlaps the call's copies (where they poll).
    this.wakeWorkers();
    return threads;
  }

  /**
   * Runs a batch call over `threads` threads (from `batchThreads`), the calling thread as thread
   * 0: [Note: a batch of small products on the threads].
   */
  batch(gemm: Gemm, pack: Pack, heap: Int32Array, call: BatchCall, threads: number): void {
    const ctl = this.control;
    const per = Math.max(1, Math.floor(call.batch / (threads * CHUNKS_PER_THREAD)));
    const { table, aPack, bPack, c, m, k, n, batch, region, mr, nr } = call;
    const strides = [call.aOuter, call.aInner, call.bOuter, call.bInner];
    ctl[KIND] = BATCH;
    ctl.set([table, aPack, bPack, c, m, k, n, batch, region, per, mr, nr, ...strides], ARGS);
    this.runChunks(() => {
      batchChunks(gemm, pack, ctl, heap, ARGS, NEXT, 0, this.tileBytes);
    });
  }

  /** Batch chunks the workers have done since they started (the tests' check that they help). */
  get batchedByWorkers(): number {
    return Atomics.load(this.control, BATCHED);
  }

  /**
   * C rows [0, m) = packed A times packed B (added to C with `acc`: [Note: the WASM matmul in
   * slices of k]), split between this thread and the workers.
   */
  gemm(
    gemm: Gemm,
    ap: number,
    bp: number,
    c: number,
    m: number,
    k: number,
    n: number,
    acc = false,
  ): void {
    const add = acc ? 1 : 0;
    const threads = this.threadsFor(m, m * k * n);
    if (threads === 1) {
      gemm(ap, bp, c, m, k, n, 0, add);
      return;
    }
    const ctl = this.control;
    // A packed A panel of the register tile's rows is rowMultiple * k floats, so a chunk of whole
    // tiles starting at row i starts at ap + i * k * 4.
    const tiles = Math.ceil(m / this.rowMultiple / (threads * CHUNKS_PER_THREAD));
    const chunk =
      Math.max(1, Math.min(Math.floor(CHUNK_ROWS / this.rowMultiple), tiles)) * this.rowMultiple;
    ctl[KIND] = GEMM;
    ctl.set([ap, bp, c, k, n, m, chunk, add], ARGS);
    this.runChunks(() => {
      for (
        let i = Atomics.add(ctl, NEXT, 1) * chunk;
        i < m;
        i = Atomics.add(ctl, NEXT, 1) * chunk
      ) {
        gemm(ap + i * k * 4, bp, c + i * n * 4, Math.min(chunk, m - i), k, n, 0, add);
      }
    });
  }

  /**
   * Packs one or two operands ([Note: matmul threads]: packing in parallel), split between this
   * thread and the workers in chunks of whole panels, for a gemm of `macs` multiply-adds (below
   * THREADED_MIN_MACS or PACK_MIN_FLOATS, or before the workers run, this thread packs alone).
   */
  pack(pack: Pack, jobs: readonly PackJob[], macs: number): void {
    const rows = Math.max(...jobs.map((j) => j.outer));
    const floats = jobs.reduce((sum, j) => sum + j.outer * j.inner, 0);
    const threads = floats < PACK_MIN_FLOATS ? 1 : this.threadsFor(rows, macs);
    if (threads === 1) {
      for (const j of jobs)
        pack(j.src, j.dst, j.outer, j.inner, j.width, j.strideOuter, j.strideInner);
      return;
    }
    const ctl = this.control;
    ctl[KIND] = PACK;
    for (let i = 0; i < 2; i++) {
      const j = jobs[i];
      // Whole panels a chunk, about CHUNKS_PER_THREAD chunks a thread.
      const panels =
        j === undefined ? 1 : Math.ceil(j.outer / j.width / (threads * CHUNKS_PER_THREAD));
      const words =
        j === undefined
          ? [0, 0, 0, 0, 1, 0, 0, 1]
          : [
              j.src,
              j.dst,
              j.outer,
              j.inner,
              j.width,
              j.strideOuter,
              j.strideInner,
              panels * j.width,
            ];
      ctl.set(words, ARGS + i * PACK_WORDS);
    }
    this.runChunks(() => packChunks(pack, ctl, ARGS, NEXT, PACK_WORDS));
  }

  /**
   * Threads a map of `n` elements would use now ([Note: GELU on the matmul's threads] in
   * gelu-threads.ts): 1 below MAP_MIN_ELEMENTS or before the workers run. Where it splits, the
   * workers are woken now, so that their wake-up overlaps the call's copies (where they poll).
   */
  mapThreads(n: number): number {
    const threads = n < MAP_MIN_ELEMENTS ? 1 : this.threadsNow();
    if (threads > 1) this.wakeWorkers();
    return threads;
  }

  /**
   * o = gelu(x), or dy gelu'(x) where `dy` is not null (byte addresses in the module's memory),
   * over `n` elements, split between this thread and the workers in chunks of `chunk` elements
   * (a multiple of 4).
   */
  map(
    gelu: GeluMap,
    geluGrad: GeluGradMap,
    x: number,
    dy: number | null,
    o: number,
    n: number,
    chunk: number,
  ): void {
    const ctl = this.control;
    ctl[KIND] = MAP;
    ctl.set([dy === null ? GELU_MAP : GELU_GRAD_MAP, x, dy ?? 0, o, n, chunk], ARGS);
    this.runChunks(() => mapChunks(gelu, geluGrad, ctl, ARGS, NEXT));
  }

  /**
   * Threads an attention call of `pairs` (batch element, head) pairs and `macs` multiply-adds
   * in all would use now ([Note: attention's heads in one call] in attention-kernel.ts): 1 for
   * one pair or under BATCH_MIN_MACS, as a batch of small products. Where it splits, the workers
   * are woken now, so that their wake-up overlaps the call's copies.
   */
  attentionThreads(pairs: number, macs: number): number {
    if (pairs < 2 || macs < BATCH_MIN_MACS) return 1;
    const threads = this.threadsNow();
    if (threads > 1) this.wakeWorkers();
    return threads;
  }

  /**
   * Runs an attention call (its ATTENTION_WORDS words: attention-chunks.ts) over the threads, the
   * calling thread as thread 0; `memory` is the module's memory.
   */
  attention(
    forward: AttentionForward,
    backward: AttentionBackward,
    words: readonly number[],
    memory: ArrayBuffer | SharedArrayBuffer,
  ): void {
    const ctl = this.control;
    ctl[KIND] = ATTENTION;
    ctl.set(words, ARGS);
    this.runChunks(() => {
      attentionChunks(forward, backward, ctl, memory, ARGS, NEXT, 0);
    });
  }

  /** Attention chunks the workers have done since they started (the tests' check that they help). */
  get attendedByWorkers(): number {
    return Atomics.load(this.control, ATTENDED);
  }

  /** Map chunks the workers have done since they started (the tests' check that they help). */
  get mappedByWorkers(): number {
    return Atomics.load(this.control, MAPPED);
  }

  /** Pack chunks the workers have done since they started (the tests' check that they pack). */
  get packedByWorkers(): number {
    return Atomics.load(this.control, PACKED);
  }
}
