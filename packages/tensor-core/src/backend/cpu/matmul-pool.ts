import { loadThreads, type NodeThreads, type ThreadWorker } from '#platform';
import { BackendError } from '../../errors.js';
import { threadsOn } from './matmul-thread-count.js';
import {
  CLOSED,
  CONTROL_WORDS,
  closeCall,
  DONE,
  describeCall,
  FAILED,
  GENERATION,
  JOIN,
  NEXT,
  ONLINE,
  openDoor,
  REPORT_LENGTH,
  REPORT_UNITS,
  readReport,
  SPIN_MS,
  SPIN_US,
  STOP,
  WORKER_LOOP,
} from './matmul-worker.js';

// The pool of the WASM matmul's threads ([Note: matmul threads] in matmul-threads.ts): its
// workers' lives (start, the count of those running, stop) and one meeting of the threads, a
// call whose chunks every thread claims ([Note: joining a call] in matmul-worker.ts). What the
// calls are, and when each is worth a meeting, is MatmulThreads's, which extends it.

/** Worker threads sharing one module instance's memory, and their meetings. */
export class MatmulPool {
  protected readonly control: Int32Array;
  /** Where a failed worker writes what it threw (`matmul-worker.ts`). */
  private readonly report: Uint16Array;
  protected workers: ThreadWorker[] = [];
  /** Whether this thread may block in `Atomics.wait` (a page's main thread may not: it spins). */
  private canBlock = true;
  /** How long either side polls before it blocks ([Note: polling only with a core to spare]). */
  protected spinMs = SPIN_MS;
  private ready = false;
  private stopped = false;
  private starting: Promise<number> | null = null;

  /**
   * @param threads threads in all, the caller's included, or `'auto'`: one per core, on the main
   *   thread only (ranks in worker threads already fill the cores), at most `maxThreads`.
   * @param tileBytes bytes of one thread's edge tile; thread i's is at i * tileBytes.
   */
  constructor(
    private readonly module: WebAssembly.Module,
    private readonly memory: WebAssembly.Memory,
    private readonly threads: number | 'auto',
    private readonly maxThreads: number,
    protected readonly tileBytes: number,
  ) {
    this.control = new Int32Array(new SharedArrayBuffer(4 * CONTROL_WORDS));
    this.report = new Uint16Array(new SharedArrayBuffer(2 * REPORT_UNITS));
    this.control[JOIN] = CLOSED;
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
    const count = Math.min(this.maxThreads, Math.max(1, threadsOn(platform, this.threads))) - 1;
    const { module, memory } = this;
    this.canBlock = platform.canBlock;
    this.spinMs = count + 1 > platform.cores ? 0 : SPIN_MS;
    Atomics.store(this.control, SPIN_US, Math.round(this.spinMs * 1000));
    for (let index = 0; index < count; index++) {
      const worker = platform.spawnWorker(WORKER_LOOP, {
        module,
        memory,
        control: this.control.buffer,
        report: this.report.buffer,
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
  protected running(): boolean {
    if (!this.ready && !this.stopped && this.workers.length > 0) {
      this.ready = Atomics.load(this.control, ONLINE) === this.workers.length;
    }
    return this.ready;
  }

  /**
   * Whether the threads poll before they block: false where the pool has more threads than the
   * process's cores ([Note: polling only with a core to spare]).
   */
  get polls(): boolean {
    return this.spinMs > 0;
  }

  /** Threads a large call uses now: 1 until every worker runs its loop. */
  get inUse(): number {
    return this.running() ? this.workers.length + 1 : 1;
  }

  /**
   * Threads a call that splits uses now: every thread once the workers run their loops; 1 until
   * then (the first such call starts them) and after `stop`.
   */
  protected threadsNow(): number {
    if (!this.running()) {
      if (!this.stopped) void this.start();
      return 1;
    }
    return this.workers.length + 1;
  }

  /**
   * Wakes the workers ahead of a call that will split, so that their wake-up overlaps this
   * thread's copies and packing: a woken worker finds no open call and polls for SPIN_MS ([Note:
   * joining a call]), in which the call comes. Not where the threads do not poll ([Note: polling
   * only with a core to spare]): a woken worker would block again.
   */
  protected wakeWorkers(): void {
    if (this.spinMs > 0) Atomics.notify(this.control, GENERATION);
  }

  /**
   * Publishes the call in the control block, wakes the workers, does chunks, waits for them. A
   * chunk that throws on this thread still waits for the workers (they are claiming the call's
   * chunks), so the next call never meets this one's workers; a worker's failure stops the pool
   * (later calls run on this thread) and throws a `BackendError` with the worker's report.
   */
  protected runChunks(work: () => void): void {
    const ctl = this.control;
    Atomics.store(ctl, NEXT, 0);
    Atomics.store(ctl, DONE, 0);
    Atomics.store(ctl, FAILED, 0);
    Atomics.store(ctl, REPORT_LENGTH, 0);
    const generation = (Atomics.load(ctl, GENERATION) + 1) | 0;
    Atomics.store(ctl, JOIN, openDoor(generation));
    Atomics.store(ctl, GENERATION, generation);
    Atomics.notify(ctl, GENERATION);
    let own: unknown = null;
    try {
      work();
    } catch (error) {
      own = error;
      // The call has failed: the workers claim no more of its chunks.
      Atomics.store(ctl, NEXT, 2 ** 30);
    }
    // Every chunk is claimed: a worker that has not joined by now has nothing to do, so only
    // the joined ones are waited for, polled for SPIN_MS (they are computing their last chunk)
    // and then blocked on ([Note: joining a call]).
    const workers = this.workers.length;
    const joined = closeCall(ctl, JOIN);
    const until = performance.now() + this.spinMs;
    for (let done = Atomics.load(ctl, DONE); done < joined; done = Atomics.load(ctl, DONE)) {
      if (this.canBlock && performance.now() >= until) Atomics.wait(ctl, DONE, done);
    }
    const report = readReport(ctl, this.report);
    if (report !== null) {
      const call = describeCall(ctl);
      const bytes = this.memory.buffer.byteLength;
      this.stop();
      throw new BackendError(
        'matmul',
        `worker thread ${report.worker + 1} of ${workers} failed in ${call}, the module's memory ${bytes} bytes: ${report.said} (the matmul runs on the calling thread from now on)`,
        own === null ? {} : { cause: own },
      );
    }
    if (own !== null) throw own;
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
