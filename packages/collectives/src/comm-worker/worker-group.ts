import { type CollectiveErrorFields, GroupAbortedError } from '../errors.js';
import { checkPeer, checkShard } from '../group/operand-checks.js';
import { Work } from '../group/work.js';
import { checkReduceOp, type ReduceOp } from '../kernels/reduce.js';
import {
  type CollectiveData,
  type CommDType,
  describeOperand,
  type OperandInfo,
} from '../operand.js';
import {
  type OpOptions,
  ProcessGroup,
  type ProcessGroupOptions,
  type ReduceOptions,
} from '../process-group.js';
import { CommWorker, type CommWorkerOptions } from './comm-worker.js';
import type { OpMessage, SharedOperand } from './handshake.js';
import { type StagedOperand, StagingPool } from './worker-operands.js';

/** Completion times taken on the worker, per handle ([Note: the communication worker handshake]). */
const completions = new WeakMap<Work, () => number>();

/** Hands one operand over: read at issue (`read`), copied back at completion (`written`). */
type Stage = (info: OperandInfo, read: boolean, written: boolean) => SharedOperand;

/** An op's body on the rank's thread: stages its operands, then makes its message for an id. */
type Build = (stage: Stage) => (id: number) => OpMessage;

/**
 * [Note: a ProcessGroup whose communication runs on a worker]
 * `WorkerGroup` is what `initProcessGroup({ progress: 'worker' })` returns: a `ProcessGroup` (the
 * class, so every caller's types, `instanceof` and `group.transport.kind` hold) whose calls run
 * on the rank's communication worker. Each call checks its arguments here with the checks of the
 * ordinary group (group/operand-checks.ts: same errors, thrown at the call), hands its operands
 * over (worker-operands.ts) and posts itself at once, so it starts while the rank's thread runs a
 * kernel; the worker runs it on its own `ProcessGroup` of the same ranks, path and options, whose
 * queue, fingerprints, deadlines and errors are those of every path. The group's `transport` is
 * the rank's `CommWorker`: its abort state is the worker's transport's, so `state`, `abort` and
 * the errors of calls after an abort are the base class's own code. The base's queue and plan
 * stay idle. `newGroup` numbers each call on both threads alike (members or not), so the worker's
 * sub-group of the same path carries each call.
 */
export class WorkerGroup extends ProcessGroup {
  private readonly comm: CommWorker;
  private readonly handover: StagingPool;
  /** The group's number on the worker (0 the world). */
  private id = 0;
  private seq = 0;
  private readonly p2pSeq = { send: new Map<number, number>(), recv: new Map<number, number>() };
  /** Settles once every op issued on this group so far has settled. */
  private tail: Promise<unknown> = Promise.resolve();

  private constructor(
    comm: CommWorker,
    ranks: readonly number[],
    path: string,
    options: ProcessGroupOptions,
    staging: StagingPool,
  ) {
    super(comm, ranks, path, options);
    this.comm = comm;
    this.handover = staging;
  }

  /**
   * When the worker saw `work` (a handle of a `WorkerGroup`) complete or fail, in milliseconds
   * since the epoch (`performance.timeOrigin + performance.now()`, one clock for both threads);
   * undefined while it has not, or for a handle of another group. Read it before 1024 more ops
   * are issued on the rank (the op's control slot is reused then).
   */
  static completedAt(work: Work): number | undefined {
    const at = completions.get(work)?.();
    return at === undefined || at === 0 ? undefined : at;
  }

  /** Starts the rank's communication worker, which joins the others, and returns the world group. */
  static async start(options: CommWorkerOptions): Promise<WorkerGroup> {
    const comm = await CommWorker.start(options);
    const ranks = Array.from({ length: comm.size }, (_, i) => i);
    return new WorkerGroup(comm, ranks, '', options.group ?? {}, new StagingPool());
  }

  /** As `ProcessGroup.newGroup`; the worker makes the same sub-group (a `WorkerGroup` here). */
  override newGroup(
    ranks: readonly number[],
    options: ProcessGroupOptions = {},
  ): ProcessGroup | null {
    const child = super.newGroup(ranks, options) as WorkerGroup | null;
    const id = this.comm.nextGroup();
    if (child !== null) child.id = id;
    this.comm.post({ type: 'newGroup', parent: this.id, id, ranks: [...ranks], options });
    return child;
  }

  protected override subgroup(
    ranks: number[],
    path: string,
    options: ProcessGroupOptions,
  ): ProcessGroup {
    return new WorkerGroup(this.comm, ranks, path, options, this.handover);
  }

  /** Memory the worker reads and writes in place: an array on a `SharedArrayBuffer`. */
  override allocate(dtype: 'f32', count: number): Float32Array;
  override allocate(dtype: 'i32', count: number): Int32Array;
  override allocate(dtype: 'f16' | 'bf16', count: number): Uint16Array;
  override allocate(dtype: 'f32' | 'i32', count: number): Float32Array | Int32Array;
  override allocate(dtype: CommDType, count: number): Float32Array | Int32Array | Uint16Array;
  override allocate(dtype: CommDType, count: number): Float32Array | Int32Array | Uint16Array {
    const buffer = new SharedArrayBuffer(count * (dtype === 'f32' || dtype === 'i32' ? 4 : 2));
    if (dtype === 'f32') return new Float32Array(buffer);
    if (dtype === 'i32') return new Int32Array(buffer);
    return new Uint16Array(buffer);
  }

  /** True: collectives of `allocate`d buffers run in place, on the worker. */
  override get allocatesRegistered(): boolean {
    return true;
  }

  /** Nothing to release: `allocate`'s memory is garbage-collected. */
  override free(_buffer: Float32Array | Int32Array | Uint16Array): void {}

  /** As `ProcessGroup.allReduce`, run by the worker. */
  override allReduce(data: CollectiveData, options: ReduceOptions = {}): Work {
    const info = describeOperand('allReduce', data, options.dtype);
    const op: ReduceOp = options.op ?? 'sum';
    checkReduceOp('allReduce', op, info.dtype);
    return this.issue(
      'allReduce',
      () => this.seq++,
      (stage) => {
        const shared = stage(info, true, true);
        return (id) => ({ type: 'allReduce', ...this.head(id, options), data: shared, op });
      },
    );
  }

  /** As `ProcessGroup.allGather`, run by the worker. */
  override allGather(input: CollectiveData, output: CollectiveData, options: OpOptions = {}): Work {
    const source = describeOperand('allGather', input, options.dtype);
    const target = describeOperand('allGather', output, options.dtype);
    checkShard('allGather', this.rank, this.size, source, target, 'input');
    return this.issue(
      'allGather',
      () => this.seq++,
      (stage) => {
        const inShared = stage(source, true, false);
        const outShared = stage(target, false, true);
        return (id) => ({
          type: 'allGather',
          ...this.head(id, options),
          input: inShared,
          output: outShared,
        });
      },
    );
  }

  /** As `ProcessGroup.reduceScatter`, run by the worker. */
  override reduceScatter(
    input: CollectiveData,
    output: CollectiveData,
    options: ReduceOptions = {},
  ): Work {
    const source = describeOperand('reduceScatter', input, options.dtype);
    const target = describeOperand('reduceScatter', output, options.dtype);
    checkShard('reduceScatter', this.rank, this.size, target, source, 'output');
    const op: ReduceOp = options.op ?? 'sum';
    checkReduceOp('reduceScatter', op, source.dtype);
    return this.issue(
      'reduceScatter',
      () => this.seq++,
      (stage) => {
        const inShared = stage(source, true, false);
        const outShared = stage(target, false, true);
        return (id) => ({
          type: 'reduceScatter',
          ...this.head(id, options),
          input: inShared,
          output: outShared,
          op,
        });
      },
    );
  }

  /** As `ProcessGroup.broadcast`, run by the worker. */
  override broadcast(data: CollectiveData, root: number, options: OpOptions = {}): Work {
    const info = describeOperand('broadcast', data, options.dtype);
    checkPeer('broadcast', this.rank, this.size, root, true);
    return this.issue(
      'broadcast',
      () => this.seq++,
      (stage) => {
        const shared = stage(info, true, true);
        return (id) => ({ type: 'broadcast', ...this.head(id, options), data: shared, root });
      },
    );
  }

  /** As `ProcessGroup.barrier`, run by the worker. */
  override barrier(options: OpOptions = {}): Work {
    return this.issue(
      'barrier',
      () => this.seq++,
      () => (id) => ({
        type: 'barrier',
        ...this.head(id, options),
      }),
    );
  }

  /** As `ProcessGroup.send`, run by the worker. */
  override send(data: CollectiveData, peer: number, options: OpOptions = {}): Work {
    return this.peerOp('send', data, peer, options);
  }

  /** As `ProcessGroup.recv`, run by the worker. */
  override recv(data: CollectiveData, peer: number, options: OpOptions = {}): Work {
    return this.peerOp('recv', data, peer, options);
  }

  /** Waits for this group's ops, closes its twin on the worker (the world: the worker itself). */
  /** Nothing to give a turn to: the worker moves this group's ops ([Note: progress turns]). */
  override progress(): Promise<void> {
    return Promise.resolve();
  }

  override async close(): Promise<void> {
    if (this.state === 'closed') return;
    await this.tail;
    if (this.id !== 0) this.comm.post({ type: 'closeGroup', group: this.id });
    await super.close();
  }

  private peerOp(
    op: 'send' | 'recv',
    data: CollectiveData,
    peer: number,
    options: OpOptions,
  ): Work {
    const info = describeOperand(op, data, options.dtype);
    checkPeer(op, this.rank, this.size, peer, false);
    const counters = this.p2pSeq[op];
    const next = () => {
      const seq = counters.get(peer) ?? 0;
      counters.set(peer, seq + 1);
      return seq;
    };
    return this.issue(op, next, (stage) => {
      const shared = stage(info, op === 'send', op === 'recv');
      return (id) => ({ type: op, ...this.head(id, options), data: shared, peer });
    });
  }

  private head(id: number, options: OpOptions): { id: number; group: number; timeoutMs?: number } {
    const { timeoutMs } = options;
    return { id, group: this.id, ...(timeoutMs === undefined ? {} : { timeoutMs }) };
  }

  /**
   * Hands the op to the worker now, or fails its handle with the error the ordinary group gives
   * a call on a closed or aborted group (the base's `assertUsable`).
   */
  private issue(op: string, nextSeq: () => number, build: Build): Work {
    this.comm.checkCapacity(op);
    const seq = nextSeq();
    const fields: CollectiveErrorFields = { op, rank: this.rank, seq };
    const staged: StagedOperand[] = [];
    const stage: Stage = (info, read, written) => {
      const operand = this.handover.share(op, info, read, written);
      staged.push(operand);
      return operand.shared;
    };
    let message: (id: number) => OpMessage;
    try {
      message = build(stage);
    } catch (error) {
      for (const operand of staged) operand.release();
      throw error;
    }
    let promise: Promise<void>;
    let completed = () => 0;
    if (this.state !== 'ready' || this.comm.gone) {
      for (const operand of staged) operand.release();
      promise = Promise.reject(this.refusal(fields));
    } else {
      const reads = staged.flatMap((operand) => (operand.ready === null ? [] : [operand.ready]));
      const ready = reads.length === 0 ? null : Promise.all(reads).then(() => {});
      const issued = this.comm.issue(op, message, ready);
      completed = issued.completedAt;
      promise = issued.promise.then(
        () => {
          for (const operand of staged) operand.finish();
        },
        (error: unknown) => {
          for (const operand of staged) operand.release();
          throw error;
        },
      );
    }
    this.tail = this.tail.then(() => promise).catch(() => {});
    const work = new Work(op, seq, promise);
    completions.set(work, completed);
    return work;
  }

  private refusal(fields: CollectiveErrorFields): unknown {
    try {
      this.assertUsable(fields);
    } catch (error) {
      return error;
    }
    // A sub-group whose world (and worker) closed first.
    return new GroupAbortedError(fields, 'the group is closed');
  }
}
