import { ArgumentError } from '@webshard/tensor-core';
import { Worker } from 'node:worker_threads';
import { type AbortReason, type CollectiveErrorFields, GroupAbortedError } from '../errors.js';
import { checkReduceOp, type ReduceOp } from '../kernels/reduce.js';
import type { CollectiveData, CommDType } from '../operand.js';
import type {
  GroupState,
  OpOptions,
  ProcessGroupOptions,
  ReduceOptions,
} from '../process-group.js';
import { Work } from '../group/work.js';
import { waitAsync } from '../transports/shm/shm-wait.js';
import {
  type CommWorkerInit,
  CONTROL_SLOTS,
  type ControlViews,
  controlViews,
  createControlBlock,
  type FromWorker,
  type OpMessage,
  type ToWorker,
} from './handshake.js';
import { rebuildError } from './posted-error.js';
import { checkShard, hostArray, StagingPool } from './worker-operands.js';

/** How to start the worker's module (tests start the TypeScript source through tsx). */
export interface CommWorkerModule {
  readonly file: string | URL;
  readonly eval?: boolean;
  readonly execArgv?: string[];
}

/** Options of `CommWorker.start`. */
export interface CommWorkerOptions {
  /** The rendezvous store's address, `ws://host:port`. */
  storeUrl: string;
  rank: number;
  size: number;
  token: string;
  /** Deadline for joining, and the group's default op deadline. Default 30 000 ms. */
  timeoutMs?: number;
  /** Options of the worker's world group. */
  group?: ProcessGroupOptions;
  /** The worker's module; default comm-worker-main.js beside this file (the built package). */
  worker?: CommWorkerModule;
}

interface Pending {
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
  /** Copies staged results back into the caller's arrays (on the rank's thread). */
  readonly finish: () => void;
}

/** Completion times taken on the worker, per handle ([Note: the communication worker handshake]). */
const completions = new WeakMap<Work, () => number>();

/**
 * When the worker saw `work` complete (or fail), on the clock of `sharedClock`; undefined while
 * it has not, or for a handle of another path. Read it before `CONTROL_SLOTS` more ops are issued:
 * the op's slot is reused then.
 */
export function completedAt(work: Work): number | undefined {
  const at = completions.get(work)?.();
  return at === undefined || at === 0 ? undefined : at;
}

/**
 * One rank's world group whose communication runs on its own thread: the rank's thread issues
 * (`allReduce`, `allGather`, `reduceScatter`, `broadcast`, `barrier`), a communication worker
 * moves the bytes over `tcp` and reduces, so an op issued before a kernel that never yields is
 * done when the kernel ends ([Note: the communication worker handshake] in handshake.ts). Calls,
 * options, `Work` handles and errors are those of `ProcessGroup`.
 */
export class CommWorker {
  readonly rank: number;
  readonly size: number;
  private readonly control: ControlViews;
  private readonly pending = new Map<number, Pending>();
  private readonly staging = new StagingPool();
  private nextId = 0;
  private lifecycle: GroupState = 'ready';
  private abortReason: AbortReason | null = null;
  private closing: Promise<void> | null = null;
  private onClosed: () => void = () => {};
  private exited = false;

  private constructor(
    private readonly worker: Worker,
    init: CommWorkerInit,
  ) {
    this.rank = init.rank;
    this.size = init.size;
    this.control = controlViews(init.control);
  }

  /** Starts the worker and waits until it has joined the other ranks. */
  static async start(options: CommWorkerOptions): Promise<CommWorker> {
    const init: CommWorkerInit = {
      storeUrl: options.storeUrl,
      rank: options.rank,
      size: options.size,
      token: options.token,
      timeoutMs: options.timeoutMs ?? 30_000,
      group: { timeoutMs: options.timeoutMs ?? 30_000, ...options.group },
      control: createControlBlock(),
    };
    const module = options.worker ?? { file: new URL('./comm-worker-main.js', import.meta.url) };
    const worker = new Worker(module.file, {
      eval: module.eval ?? false,
      execArgv: module.execArgv ?? [],
      workerData: { commWorker: init },
    });
    const comm = new CommWorker(worker, init);
    await new Promise<void>((resolve, reject) => {
      const onMessage = (message: FromWorker) => {
        if (message.type === 'ready') {
          worker.off('message', onMessage);
          resolve();
        } else if (message.type === 'init-failed') {
          worker.off('message', onMessage);
          reject(rebuildError(message.error));
        }
      };
      worker.on('message', onMessage);
      worker.once('error', reject);
      worker.once('exit', (code) =>
        reject(
          new ArgumentError(
            'commWorker',
            `the communication worker exited (${code}) before it joined`,
          ),
        ),
      );
    });
    worker.on('message', (message: FromWorker) => comm.received(message));
    worker.on('error', (error) => comm.lost(`the communication worker threw: ${error.message}`));
    worker.on('exit', (code) => {
      comm.exited = true;
      comm.onClosed();
      if (comm.closing === null) comm.lost(`the communication worker exited (${code})`);
    });
    return comm;
  }

  /** `ready` until an op failed with an abort (`aborted`) or `close()` (`closed`). */
  get state(): GroupState {
    return this.lifecycle;
  }

  /**
   * A buffer on a `SharedArrayBuffer`, which the worker reads and writes in place: no copy at
   * issue or completion. Ordinary arrays work too, copied once each way.
   */
  allocate(dtype: CommDType, count: number): Float32Array | Int32Array | Uint16Array {
    const buffer = new SharedArrayBuffer(count * (dtype === 'f32' || dtype === 'i32' ? 4 : 2));
    if (dtype === 'f32') return new Float32Array(buffer);
    if (dtype === 'i32') return new Int32Array(buffer);
    return new Uint16Array(buffer);
  }

  /** As `ProcessGroup.allReduce`. */
  allReduce(data: CollectiveData, options: ReduceOptions = {}): Work {
    const host = hostArray('allReduce', data, options.dtype);
    const op = options.op ?? 'sum';
    checkReduceOp('allReduce', op, host.dtype);
    return this.issue('allReduce', (id) => {
      const [shared, finish] = this.staging.share(host, true, true);
      return [{ type: 'allReduce', id, data: shared, op, ...this.deadline(options) }, finish];
    });
  }

  /** As `ProcessGroup.allGather`. */
  allGather(input: CollectiveData, output: CollectiveData, options: OpOptions = {}): Work {
    const source = hostArray('allGather', input, options.dtype);
    const target = hostArray('allGather', output, options.dtype);
    checkShard('allGather', this.rank, this.size, source, target, 'input');
    return this.issue('allGather', (id) => {
      const [inShared, inFinish] = this.staging.share(source, true, false);
      const [outShared, outFinish] = this.staging.share(target, false, true);
      return [
        { type: 'allGather', id, input: inShared, output: outShared, ...this.deadline(options) },
        () => {
          inFinish();
          outFinish();
        },
      ];
    });
  }

  /** As `ProcessGroup.reduceScatter`. */
  reduceScatter(input: CollectiveData, output: CollectiveData, options: ReduceOptions = {}): Work {
    const source = hostArray('reduceScatter', input, options.dtype);
    const target = hostArray('reduceScatter', output, options.dtype);
    checkShard('reduceScatter', this.rank, this.size, target, source, 'output');
    const op: ReduceOp = options.op ?? 'sum';
    checkReduceOp('reduceScatter', op, source.dtype);
    return this.issue('reduceScatter', (id) => {
      const [inShared, inFinish] = this.staging.share(source, true, false);
      const [outShared, outFinish] = this.staging.share(target, false, true);
      const message: OpMessage = {
        type: 'reduceScatter',
        id,
        input: inShared,
        output: outShared,
        op,
        ...this.deadline(options),
      };
      return [
        message,
        () => {
          inFinish();
          outFinish();
        },
      ];
    });
  }

  /** As `ProcessGroup.broadcast`. */
  broadcast(data: CollectiveData, root: number, options: OpOptions = {}): Work {
    const host = hostArray('broadcast', data, options.dtype);
    if (!Number.isInteger(root) || root < 0 || root >= this.size)
      throw new ArgumentError(
        'broadcast',
        `rank ${this.rank}: ${root} is not a rank of a group of ${this.size}`,
      );
    return this.issue('broadcast', (id) => {
      const [shared, finish] = this.staging.share(host, true, true);
      return [{ type: 'broadcast', id, data: shared, root, ...this.deadline(options) }, finish];
    });
  }

  /** As `ProcessGroup.barrier`. */
  barrier(options: OpOptions = {}): Work {
    return this.issue('barrier', (id) => [
      { type: 'barrier', id, ...this.deadline(options) },
      () => {},
    ]);
  }

  /** Aborts the group on every rank, as `ProcessGroup.abort`. */
  abort(message = 'aborted by the application'): void {
    this.post({ type: 'abort', message });
  }

  /** Closes after the ops issued (the worker's group drains them first), closes the worker's group and transport, and ends the worker. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      if (!this.exited) {
        const closed = new Promise<void>((resolve) => {
          this.onClosed = resolve;
        });
        this.post({ type: 'close' });
        await closed;
      }
      this.lifecycle = 'closed';
    })();
    return this.closing;
  }

  private deadline(options: OpOptions): { timeoutMs?: number } {
    return options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs };
  }

  /** Numbers the op, posts it now (step 2 of the handshake) and waits for its word (step 3). */
  private issue(op: string, build: (id: number) => [OpMessage, () => void]): Work {
    const id = this.nextId++;
    const fields: CollectiveErrorFields = { op, rank: this.rank, seq: id };
    if (this.lifecycle !== 'ready') {
      const why = this.abortReason
        ? `the group was aborted earlier by rank ${this.abortReason.origin} (${this.abortReason.kind}): ${this.abortReason.message}`
        : 'the group is closed';
      const failed = Promise.reject(new GroupAbortedError(fields, why));
      return new Work(op, id, failed);
    }
    if (this.pending.size >= CONTROL_SLOTS)
      throw new ArgumentError(op, `rank ${this.rank}: more than ${CONTROL_SLOTS} ops pending`);
    const slot = id % CONTROL_SLOTS;
    const { words, completedAt: times } = this.control;
    Atomics.store(words, slot, 0);
    times[slot] = 0;
    const [message, finish] = build(id);
    const promise = new Promise<void>((resolve, reject) => {
      this.pending.set(id, { resolve, reject, finish });
    });
    this.post(message);
    const waited = waitAsync(words, slot, 0);
    const settle = () => {
      if (Atomics.load(words, slot) !== id + 1) return;
      const pending = this.pending.get(id);
      if (pending === undefined) return;
      this.pending.delete(id);
      pending.finish();
      pending.resolve();
    };
    if (waited.async) void waited.value.then(settle);
    else settle();
    const work = new Work(op, id, promise);
    completions.set(work, () => times[slot]!);
    return work;
  }

  private post(message: ToWorker): void {
    this.worker.postMessage(message);
  }

  private received(message: FromWorker): void {
    if (message.type === 'aborted') {
      this.abortReason ??= message.reason;
      if (this.lifecycle === 'ready') this.lifecycle = 'aborted';
      return;
    }
    if (message.type === 'failed') {
      const pending = this.pending.get(message.id);
      if (pending === undefined) return;
      this.pending.delete(message.id);
      if (message.error.reason !== undefined) {
        this.abortReason ??= message.error.reason;
        if (this.lifecycle === 'ready') this.lifecycle = 'aborted';
      }
      pending.reject(rebuildError(message.error));
    }
  }

  /** The worker is gone: every pending op fails, as a transport abort would fail it. */
  private lost(why: string): void {
    const reason: AbortReason = { kind: 'error', origin: this.rank, message: why };
    this.abortReason ??= reason;
    if (this.lifecycle === 'ready') this.lifecycle = 'aborted';
    for (const [id, pending] of this.pending) {
      this.pending.delete(id);
      pending.reject(
        new GroupAbortedError({ op: 'commWorker', rank: this.rank, seq: id }, why, { reason }),
      );
    }
  }
}
