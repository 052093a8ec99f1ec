import { loadThreads, type NodeThreads, type ThreadWorker } from '#platform';

/** The module's `gemm` export: C (at `c`) from the packed panels of A and B, rows by tile. */
export type Gemm = (
  ap: number,
  bp: number,
  c: number,
  m: number,
  k: number,
  n: number,
  tile: number,
) => void;

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
 * `Atomics.notify`, claims and computes chunks until none is left, then waits with `Atomics.wait`
 * until every worker has counted itself done (a page's main thread may not block, so there it
 * spins on the count, for at most the chunks in flight); the kernel API stays synchronous. Each
 * thread has its own edge tile in the scratch bytes.
 *
 * Workers start at the first call large enough to use them (or `startMatmulThreads()`), and each
 * counts itself in the control block when it enters its loop; a call splits only once all have
 * (a page's worker cannot start while the page's main thread spins in a call). Until then (and
 * for small products, where waking them costs more than it saves) the calling thread does all
 * rows. The count is read from shared memory at each call, never from the workers' online events,
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
const GENERATION = 0;
const DONE = 1;
const STOP = 2;
const FAILED = 3;
const KIND = 4; // GEMM or PACK: what the call's chunks are
const ARGS = 5; // GEMM: ap, bp, c, k, n, m, rows per chunk; PACK: PACK_WORDS per job, 2 jobs
const NEXT = 21; // the next chunk to claim
const ONLINE = 22; // workers in their loop
const PACKED = 23; // pack chunks the workers have done, ever
const CONTROL_WORDS = 24;
const GEMM = 0;
const PACK = 1;
/** A pack job's words: src, dst, outer, inner, width, strideOuter, strideInner, rows per chunk. */
const PACK_WORDS = 8;

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

/** The module's `pack` export. */
export type Pack = (
  src: number,
  dst: number,
  outer: number,
  inner: number,
  width: number,
  strideOuter: number,
  strideInner: number,
) => void;

/** Rows per chunk at most (the gemm's row block), and chunks per thread at least. */
const CHUNK_ROWS = 64;
const CHUNKS_PER_THREAD = 4;
/**
 * Below this many multiply-adds (the whole call's, every batch element and block counted) a call
 * runs on the calling thread alone: 2^24, a 256-cube, about 0.4 ms on one thread here. Below it,
 * waking a worker saves little, and where processes outnumber the cores (ranks started without a
 * launcher, tests) a worker that the system has not scheduled yet holds up the call: the default
 * GPT's largest product (512 x 256 x 64, 8.4 M) stays on one thread, every GPT-2 product splits.
 */
export const THREADED_MIN_MACS = 2 ** 24;

/**
 * Packs of fewer floats (A's and B's together) than this stay on the calling thread: 2^18 (1 MiB),
 * some 0.1-0.2 ms of packing, against a meeting of the threads that costs tens of microseconds on
 * an idle machine and more where the workers wait to be scheduled. GPT-2's attention products
 * (48 a call, 256 x 64 panels each) pack alone; n = 1024 and its linear layers split.
 */
export const PACK_MIN_FLOATS = 2 ** 18;

// Runs in each worker, given the worker's data: waits for a generation, computes its rows,
// counts. An expression (a function), which each platform's `spawnWorker` calls with the data.
const WORKER_LOOP = `(function run({ module, memory, control, index, tileBytes }) {
  const { gemm, pack } = new WebAssembly.Instance(module, { env: { memory } }).exports;
  const ctl = new Int32Array(control);
  const packChunks = ${packChunks.toString()};
  let seen = 0;
  Atomics.add(ctl, ${ONLINE}, 1);
  for (;;) {
    Atomics.wait(ctl, ${GENERATION}, seen);
    seen = Atomics.load(ctl, ${GENERATION});
    if (Atomics.load(ctl, ${STOP}) !== 0) break;
    try {
      if (ctl[${KIND}] === ${PACK}) Atomics.add(ctl, ${PACKED}, packChunks(pack, ctl, ${ARGS}, ${NEXT}, ${PACK_WORDS}));
      else {
        const ap = ctl[${ARGS}], bp = ctl[${ARGS + 1}], c = ctl[${ARGS + 2}], k = ctl[${ARGS + 3}], n = ctl[${ARGS + 4}];
        const m = ctl[${ARGS + 5}], chunk = ctl[${ARGS + 6}];
        for (let i = Atomics.add(ctl, ${NEXT}, 1) * chunk; i < m; i = Atomics.add(ctl, ${NEXT}, 1) * chunk)
          gemm(ap + i * k * 4, bp, c + i * n * 4, Math.min(chunk, m - i), k, n, (index + 1) * tileBytes);
      }
    } catch {
      Atomics.store(ctl, ${FAILED}, 1);
    }
    Atomics.add(ctl, ${DONE}, 1);
    Atomics.notify(ctl, ${DONE});
  }
})`;

/**
 * Claims and packs chunks of the pack jobs in the control block until none is left: job 0's
 * chunks, then job 1's (`outer` 0 for none); returns how many it packed. A chunk is whole panels, so it writes the bytes one
 * `pack` of the whole operand writes there. Runs on every thread (the workers get its source), so
 * it uses nothing outside its arguments.
 */
function packChunks(
  pack: Pack,
  ctl: Int32Array,
  args: number,
  next: number,
  words: number,
): number {
  // No inner functions: a bundler that keeps names would wrap them in a helper the worker lacks.
  const first = Math.ceil(ctl[args + 2]! / ctl[args + 7]!);
  const all = first + Math.ceil(ctl[args + words + 2]! / ctl[args + words + 7]!);
  let done = 0;
  for (let i = Atomics.add(ctl, next, 1); i < all; i = Atomics.add(ctl, next, 1)) {
    const job = i < first ? args : args + words;
    const rows = ctl[job + 7]!;
    const start = (i < first ? i : i - first) * rows;
    const [so, inner] = [ctl[job + 5]!, ctl[job + 3]!];
    const outer = Math.min(rows, ctl[job + 2]! - start);
    pack(
      ctl[job]! + start * so * 4,
      ctl[job + 1]! + start * inner * 4,
      outer,
      inner,
      ctl[job + 4]!,
      so,
      ctl[job + 6]!,
    );
    done++;
  }
  return done;
}

/** Worker threads sharing one module instance's memory. */
export class MatmulThreads {
  private readonly control: Int32Array;
  private workers: ThreadWorker[] = [];
  /** Whether this thread may block in `Atomics.wait` (a page's main thread may not: it spins). */
  private canBlock = true;
  private ready = false;
  private stopped = false;
  private starting: Promise<number> | null = null;

  /**
   * @param threads threads in all, the caller's included, or `'auto'`: one per core, on the main
   *   thread only (ranks in worker threads already fill the cores), at most `maxThreads`.
   * @param rowMultiple rows per split are a multiple of this (the register tile's rows).
   * @param tileBytes bytes of one thread's edge tile; thread i's is at i * tileBytes.
   */
  constructor(
    private readonly module: WebAssembly.Module,
    private readonly memory: WebAssembly.Memory,
    private readonly threads: number | 'auto',
    private readonly maxThreads: number,
    private readonly rowMultiple: number,
    private readonly tileBytes: number,
  ) {
    this.control = new Int32Array(new SharedArrayBuffer(4 * CONTROL_WORDS));
  }

  /**
   * Starts the workers (once; the first call large enough to use them does it too) and resolves
   * to the thread count in use: 1 when none could start.
   */
  start(): Promise<number> {
    if (this.starting === null) {
      const platform = loadThreads();
      this.starting =
        platform instanceof Promise
          ? platform.catch(() => null).then((p) => this.spawn(p))
          : this.spawn(platform);
    }
    return this.starting;
  }

  /** Starts the workers now (synchronously); resolves once every one has said it runs. */
  private spawn(platform: NodeThreads | null): Promise<number> {
    if (platform === null || this.stopped) return Promise.resolve(1);
    const wanted =
      this.threads === 'auto' ? (platform.isMainThread ? platform.cores : 1) : this.threads;
    const count = Math.min(this.maxThreads, Math.max(1, wanted)) - 1;
    const { module, memory } = this;
    this.canBlock = platform.canBlock;
    for (let index = 0; index < count; index++) {
      const worker = platform.spawnWorker(WORKER_LOOP, {
        module,
        memory,
        control: this.control.buffer,
        index,
        tileBytes: this.tileBytes,
      });
      // A worker that dies is not waited for again: the pool stops and calls run on one thread.
      worker.onError(() => this.stop());
      this.workers.push(worker);
    }
    return Promise.all(this.workers.map((w) => w.ready)).then(
      () => {
        if (this.stopped) return 1;
        this.ready = this.workers.length > 0;
        return this.workers.length + 1;
      },
      () => {
        this.stop();
        return 1;
      },
    );
  }

  /**
   * Whether every worker runs its loop. Read from the control block, not from the workers' online
   * events: those arrive only when this thread's event loop turns, which a synchronous training
   * step never lets it do (the trainer's steps ran on one thread for that reason).
   */
  private running(): boolean {
    if (!this.ready && !this.stopped && this.workers.length > 0) {
      this.ready = Atomics.load(this.control, ONLINE) === this.workers.length;
    }
    return this.ready;
  }

  /** Threads a large call uses now: 1 until every worker runs its loop. */
  get inUse(): number {
    return this.running() ? this.workers.length + 1 : 1;
  }

  /** Threads a gemm of `m` rows would use now, in a call of `macs` multiply-adds in all. */
  threadsFor(m: number, macs: number): number {
    if (macs < THREADED_MIN_MACS) return 1;
    if (!this.running()) {
      if (!this.stopped) void this.start();
      return 1;
    }
    return Math.min(this.workers.length + 1, Math.ceil(m / this.rowMultiple));
  }

  /**
   * C rows [0, m) = packed A times packed B, split between this thread and the workers; `macs`:
   * the multiply-adds of the whole call this gemm is part of (default: this gemm's).
   */
  gemm(
    gemm: Gemm,
    ap: number,
    bp: number,
    c: number,
    m: number,
    k: number,
    n: number,
    macs = m * k * n,
  ): void {
    const threads = this.threadsFor(m, macs);
    if (threads === 1) {
      gemm(ap, bp, c, m, k, n, 0);
      return;
    }
    const ctl = this.control;
    // A packed A panel of the register tile's rows is rowMultiple * k floats, so a chunk of whole
    // tiles starting at row i starts at ap + i * k * 4.
    const tiles = Math.ceil(m / this.rowMultiple / (threads * CHUNKS_PER_THREAD));
    const chunk =
      Math.max(1, Math.min(Math.floor(CHUNK_ROWS / this.rowMultiple), tiles)) * this.rowMultiple;
    ctl[KIND] = GEMM;
    ctl.set([ap, bp, c, k, n, m, chunk], ARGS);
    this.runChunks(() => {
      for (
        let i = Atomics.add(ctl, NEXT, 1) * chunk;
        i < m;
        i = Atomics.add(ctl, NEXT, 1) * chunk
      ) {
        gemm(ap + i * k * 4, bp, c + i * n * 4, Math.min(chunk, m - i), k, n, 0);
      }
    });
  }

  /**
   * Packs one or two operands ([Note: matmul threads]: packing in parallel), split between this
   * thread and the workers in chunks of whole panels, in a call of `macs` multiply-adds in all
   * (below THREADED_MIN_MACS, or before the workers run, this thread packs alone).
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

  /** Pack chunks the workers have done since they started (the tests' check that they pack). */
  get packedByWorkers(): number {
    return Atomics.load(this.control, PACKED);
  }

  /** Publishes the call in the control block, wakes the workers, does chunks, waits for them. */
  private runChunks(work: () => void): void {
    const ctl = this.control;
    Atomics.store(ctl, NEXT, 0);
    Atomics.store(ctl, DONE, 0);
    Atomics.add(ctl, GENERATION, 1);
    Atomics.notify(ctl, GENERATION);
    work();
    const workers = this.workers.length;
    for (let done = Atomics.load(ctl, DONE); done < workers; done = Atomics.load(ctl, DONE)) {
      if (this.canBlock) Atomics.wait(ctl, DONE, done);
    }
    if (Atomics.load(ctl, FAILED) !== 0) {
      this.stop();
      throw new Error('[matmul] a worker thread of the WASM matmul trapped');
    }
  }

  /** Stops the workers (later calls run on one thread). */
  stop(): void {
    this.ready = false;
    this.stopped = true;
    Atomics.store(this.control, STOP, 1);
    Atomics.add(this.control, GENERATION, 1);
    Atomics.notify(this.control, GENERATION);
    for (const worker of this.workers.splice(0)) worker.terminate();
  }
}
