import { ArgumentError } from '@webshard/tensor-core';
import {
  type AbortReason,
  type CollectiveErrorFields,
  errorFromAbortReason,
  GroupAbortedError,
} from './errors.js';
import { checkReduceOp, type ReduceOp } from './kernels/reduce.js';
import {
  bytesOf,
  type CollectiveData,
  type CommDType,
  describeOperand,
  hostOperand,
} from './operand.js';
import { FingerprintExchange, REDUCE_NAMES } from './group/fingerprint.js';
import { OpQueue } from './group/op-queue.js';
import { OperandStaging, type StagingStats } from './operand-staging.js';
import type { CollectivePlan } from './group/collective-plan.js';
import { checkGroupRanks, checkPeer, checkShard } from './group/operand-checks.js';
import { choosePlan } from './group/plan.js';
import type { Work } from './group/work.js';
import type { Transport } from './transport-contract.js';
import { progressTurn } from './transports/progress-turn.js';

/** Settings of a process group; sub-groups inherit them. */
export interface ProcessGroupOptions {
  /** Deadline of every op in milliseconds, from the moment the op starts running. Default 30 000. */
  timeoutMs?: number;
  /**
   * Ring segment size in bytes (rounded down to whole elements). Default `'auto'`: 1 MiB, and for
   * large ops an eighth of a rank's chunk up to 4 MiB (see [Note: ring segments and window]).
   */
  segmentBytes?: number | 'auto';
  /**
   * At or below this many bytes, collectives use direct exchange (one round) instead of the ring.
   * Default 256 KiB: on loopback tcp a 2-rank 256 KiB all-reduce took about 190 us direct against
   * 270 us over the ring, and on 4 ranks 0.96 ms against 1.6 ms.
   */
  smallMessageBytes?: number;
  /**
   * Run the world group's collectives through the transport's shared arena when it has one (shm);
   * `false` keeps them on point-to-point messages. Default true. Sub-groups always use messages.
   */
  sharedMemory?: boolean;
}

/** Options of one call. */
export interface OpOptions {
  /** This op's deadline, instead of the group's. */
  timeoutMs?: number;
  /** The dtype of Uint16Array data: `f16` or `bf16`. Ignored for tensors and other arrays. */
  dtype?: 'f16' | 'bf16';
}

/** Options of a reducing call. */
export interface ReduceOptions extends OpOptions {
  /** The reduction. Default `sum`. */
  op?: ReduceOp;
}

/** The lifecycle of a group. `aborted` and `closed` are final. */
export type GroupState = 'ready' | 'aborted' | 'closed';

interface GroupShared {
  readonly transport: Transport;
  /** Tags in use on this transport, with the group path that owns each. */
  readonly tags: Map<number, string>;
}

const sharedByTransport = new WeakMap<Transport, GroupShared>();

function tagOf(path: string): number {
  if (path === '') return 0;
  let hash = 0x811c9dc5;
  for (let i = 0; i < path.length; i++) {
    hash ^= path.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash | 1) >>> 0;
}

/**
 * A group of ranks that run collectives together, on a `Transport`: its members, its lifecycle
 * and the public calls, each checked here before anything runs. Its pieces, under `group/`:
 * `OpQueue` runs the calls in issue order, each under an `OpContext` (deadline, abort) with its
 * fingerprint checked by `FingerprintExchange`, and the `CollectivePlan` chosen once when the
 * group is built runs them ([Note: one plan per group] in `group/plan.ts`).
 * See [Note: ordering, deadlines and abort] (in `group/op-queue.ts`).
 */
export class ProcessGroup {
  /** This rank in the group, 0 <= rank < size. */
  readonly rank: number;
  /** The number of ranks in the group. */
  readonly size: number;
  /** The global (transport) rank of each group rank. */
  readonly ranks: readonly number[];
  readonly transport: Transport;
  /** The transport tag of this group's messages. */
  readonly tag: number;

  private readonly options: Required<ProcessGroupOptions>;
  private readonly shared: GroupShared;
  private readonly path: string;
  private readonly plan: CollectivePlan;
  /** Host arrays for tensor operands: see [Note: operand staging]. */
  private readonly staging = new OperandStaging();
  private readonly queue: OpQueue;
  private children = 0;
  private lifecycle: GroupState = 'ready';

  /** The group of all ranks of `transport` (its world). Create one per transport. */
  static fromTransport(transport: Transport, options: ProcessGroupOptions = {}): ProcessGroup {
    const ranks = Array.from({ length: transport.size }, (_, i) => i);
    return new ProcessGroup(transport, ranks, '', options);
  }

  /** Groups are built by `fromTransport` and `newGroup` (and by subclasses: `WorkerGroup`). */
  protected constructor(
    transport: Transport,
    ranks: readonly number[],
    path: string,
    options: ProcessGroupOptions,
  ) {
    this.transport = transport;
    this.ranks = Object.freeze([...ranks]);
    this.size = ranks.length;
    this.rank = ranks.indexOf(transport.rank);
    this.path = path;
    this.tag = tagOf(path);
    this.options = {
      timeoutMs: options.timeoutMs ?? 30_000,
      segmentBytes:
        options.segmentBytes === undefined || options.segmentBytes === 'auto'
          ? 'auto'
          : Math.max(16, options.segmentBytes),
      smallMessageBytes: options.smallMessageBytes ?? 256 << 10,
      sharedMemory: options.sharedMemory ?? true,
    };
    let shared = sharedByTransport.get(transport);
    if (shared === undefined) {
      shared = { transport, tags: new Map() };
      sharedByTransport.set(transport, shared);
    }
    const owner = shared.tags.get(this.tag);
    if (owner !== undefined && owner !== path) {
      throw new ArgumentError(
        'newGroup',
        `group tag ${this.tag} of '${path}' collides with '${owner}'`,
      );
    }
    if (owner === path) {
      throw new ArgumentError(
        'newGroup',
        `a group '${path || 'world'}' already exists on this transport`,
      );
    }
    shared.tags.set(this.tag, path);
    this.shared = shared;
    this.plan = choosePlan(this, this.options, path === '', this.staging);
    const fingerprints = new FingerprintExchange(this, () => this.plan.sharedArena());
    this.queue = new OpQueue(
      this,
      fingerprints,
      this.options.timeoutMs,
      (fields) => this.assertUsable(fields),
      () => this.staging.recycle(),
    );
    transport.onAbort(() => {
      if (this.lifecycle === 'ready') this.lifecycle = 'aborted';
    });
  }

  /** `ready` until the transport aborts (`aborted`) or `close()` (`closed`). */
  get state(): GroupState {
    if (this.lifecycle === 'ready' && this.transport.abortReason !== null)
      this.lifecycle = 'aborted';
    return this.lifecycle;
  }

  /**
   * Why the group was aborted and by which rank (`origin`, a rank of the transport); null while it
   * runs. A launcher that sees several ranks fail reads it to tell the failure that aborted the
   * world from the failures the abort caused.
   */
  get abortReason(): AbortReason | null {
    return this.transport.abortReason;
  }

  /**
   * A sub-group of this group's ranks `ranks` (group ranks, ascending, no repeats), for hybrid
   * sharding. Every rank of THIS group must call `newGroup` with the same arguments in the same
   * order (no communication happens: the sub-group's tag comes from its position); members get
   * the new group, the other ranks `null`. Groups run independently, each with its own order.
   */
  newGroup(ranks: readonly number[], options: ProcessGroupOptions = {}): ProcessGroup | null {
    checkGroupRanks(ranks, this.size);
    const path = `${this.path}/${this.children++}`;
    if (!ranks.includes(this.rank)) return null;
    return this.subgroup(
      ranks.map((r) => this.ranks[r]!),
      path,
      { ...this.options, ...options },
    );
  }

  /** Builds a member's sub-group of `newGroup` (global ranks, path, merged options). */
  protected subgroup(ranks: number[], path: string, options: ProcessGroupOptions): ProcessGroup {
    return new ProcessGroup(this.transport, ranks, path, options);
  }

  /**
   * A buffer for this group's collectives, like NCCL's `ncclMemAlloc`: in the shared arena on the
   * `shm` transport's world group (and the node's arena on the world group of several nodes of
   * threads), in the group's shared WASM memory on `tcp`, where collectives of such buffers run
   * in place; an ordinary typed array elsewhere (see [Note: registered
   * buffers] in `group/registered-buffers.ts`). It comes zeroed, as a new typed array does. Release
   * it with `free`; using it after that is undefined, as with any freed memory.
   */
  allocate(dtype: 'f32', count: number): Float32Array;
  allocate(dtype: 'i32', count: number): Int32Array;
  allocate(dtype: 'f16' | 'bf16', count: number): Uint16Array;
  allocate(dtype: 'f32' | 'i32', count: number): Float32Array | Int32Array;
  allocate(dtype: CommDType, count: number): Float32Array | Int32Array | Uint16Array;
  allocate(dtype: CommDType, count: number): Float32Array | Int32Array | Uint16Array {
    return this.plan.buffers.allocate(dtype, count);
  }

  /**
   * Whether `allocate` hands out registered memory, on which collectives run in place (the `shm`
   * world group, the two-level world group, `tcp` with more than one rank), rather than ordinary
   * arrays.
   */
  get allocatesRegistered(): boolean {
    return this.plan.buffers.registered;
  }

  /** Releases a buffer from `allocate` (a no-op for ordinary arrays). */
  free(buffer: Float32Array | Int32Array | Uint16Array): void {
    this.plan.buffers.free(buffer);
  }

  /**
   * Reduce `data` over all ranks in place: afterwards every rank holds the same result, bit for
   * bit. f16 and bf16 are widened to f32, reduced in f32 and rounded to nearest even once at the
   * end; i32 wraps on overflow; `avg` is the f32 sum times 1/size (not defined for i32).
   */
  allReduce(data: CollectiveData, options: ReduceOptions = {}): Work {
    const described = describeOperand('allReduce', data, options.dtype);
    const op = options.op ?? 'sum';
    checkReduceOp('allReduce', op, described.dtype);
    const info = this.queue.pin(described);
    return this.queue.enqueue(
      {
        op: 'allReduce',
        dtype: info.dtype,
        count: info.count,
        extra: REDUCE_NAMES.indexOf(op),
        registered: this.plan.buffers.offsetOf(info),
      },
      options.timeoutMs,
      (ctx) => this.plan.allReduce(ctx, info, op),
    );
  }

  /**
   * Gather every rank's shard into `output` (`count` elements, the same on every rank). Rank r's
   * `input` is its shard `shardRange(count, size, r)`: `ceil(count / size)` elements, fewer (or
   * none) for the last ranks when `count` does not divide (PyTorch's flat-parameter padding, with
   * the padding left out). Any dtype; data is moved bit for bit.
   */
  allGather(input: CollectiveData, output: CollectiveData, options: OpOptions = {}): Work {
    const inDescribed = describeOperand('allGather', input, options.dtype);
    const outDescribed = describeOperand('allGather', output, options.dtype);
    checkShard('allGather', this.rank, this.size, inDescribed, outDescribed, 'input');
    const inInfo = this.queue.pin(inDescribed);
    const outInfo = this.queue.pin(outDescribed);
    return this.queue.enqueue(
      {
        op: 'allGather',
        dtype: outInfo.dtype,
        count: outInfo.count,
        extra: 0,
        registered: this.plan.buffers.offsetOf(outInfo, true),
      },
      options.timeoutMs,
      (ctx) => this.plan.allGather(ctx, inInfo, outInfo),
    );
  }

  /**
   * Reduce `input` (`count` elements, the same on every rank) over all ranks and leave this rank's
   * shard `shardRange(count, size, rank)` of the result in `output` (see `allGather` for uneven
   * sizes). Reductions as in `allReduce`.
   */
  reduceScatter(input: CollectiveData, output: CollectiveData, options: ReduceOptions = {}): Work {
    const inDescribed = describeOperand('reduceScatter', input, options.dtype);
    const outDescribed = describeOperand('reduceScatter', output, options.dtype);
    checkShard('reduceScatter', this.rank, this.size, outDescribed, inDescribed, 'output');
    const op = options.op ?? 'sum';
    checkReduceOp('reduceScatter', op, inDescribed.dtype);
    const inInfo = this.queue.pin(inDescribed);
    const outInfo = this.queue.pin(outDescribed);
    return this.queue.enqueue(
      {
        op: 'reduceScatter',
        dtype: inInfo.dtype,
        count: inInfo.count,
        extra: REDUCE_NAMES.indexOf(op),
        registered: this.plan.buffers.reduceScatterAddress(inInfo, outInfo),
      },
      options.timeoutMs,
      (ctx) => this.plan.reduceScatter(ctx, inInfo, outInfo, op),
    );
  }

  /** Copy `data` of rank `root` into `data` on every rank. Any dtype, bit for bit. */
  broadcast(data: CollectiveData, root: number, options: OpOptions = {}): Work {
    const described = describeOperand('broadcast', data, options.dtype);
    checkPeer('broadcast', this.rank, this.size, root, true);
    const info = this.queue.pin(described);
    return this.queue.enqueue(
      { op: 'broadcast', dtype: info.dtype, count: info.count, extra: root },
      options.timeoutMs,
      (ctx) => this.plan.broadcast(ctx, info, root),
    );
  }

  /**
   * Wait until every rank of the group has called `barrier`. A barrier that times out lists the
   * ranks that never arrived.
   */
  barrier(options: OpOptions = {}): Work {
    return this.queue.enqueue(
      { op: 'barrier', dtype: 'none', count: 0, extra: 0 },
      options.timeoutMs,
      async () => {},
    );
  }

  /**
   * Send `data` to group rank `peer`, which must call `recv` with the same dtype and element
   * count. Point-to-point ops take their turn in the group's order like collectives.
   */
  send(data: CollectiveData, peer: number, options: OpOptions = {}): Work {
    const described = describeOperand('send', data, options.dtype);
    checkPeer('send', this.rank, this.size, peer, false);
    const info = this.queue.pin(described);
    return this.queue.enqueuePeer('send', peer, info, options.timeoutMs, async (ctx) => {
      const operand = await hostOperand('send', info, false, this.staging);
      await ctx.send(peer, bytesOf(operand.host));
    });
  }

  /** Receive into `data` what group rank `peer` sends with `send`. */
  recv(data: CollectiveData, peer: number, options: OpOptions = {}): Work {
    const described = describeOperand('recv', data, options.dtype);
    checkPeer('recv', this.rank, this.size, peer, false);
    const info = this.queue.pin(described);
    return this.queue.enqueuePeer('recv', peer, info, options.timeoutMs, async (ctx) => {
      const operand = await hostOperand('recv', info, true, this.staging);
      await ctx.recv(peer, bytesOf(operand.host));
      operand.commit();
    });
  }

  /**
   * Abort the group (and every group on its transport) on every rank: pending and later ops fail
   * with `GroupAbortedError` carrying `message`.
   */
  abort(message = 'aborted by the application'): void {
    this.transport.abort({ kind: 'user', origin: this.transport.rank, message });
  }

  /**
   * Give the collectives in flight on this thread one turn of its event loop, then resolve: what
   * has arrived is read and answered, and an shm barrier still waiting sleeps rather than holding
   * the thread ([Note: progress turns]). For code that issues ops and computes before awaiting
   * them (DDP's overlapped buckets, between backward's kernels). About one event-loop iteration;
   * a group whose communication runs on a worker resolves at once.
   */
  progress(): Promise<void> {
    return progressTurn();
  }

  /** Host memory this group keeps for tensor operands ([Note: operand staging]). */
  stagingStats(): StagingStats {
    return this.staging.stats();
  }

  /**
   * Wait for the ops already issued, then refuse further ones. Closing the world group (the one
   * from `fromTransport`) also closes the transport.
   */
  async close(): Promise<void> {
    if (this.lifecycle === 'closed') return;
    await this.queue.drained();
    this.lifecycle = 'closed';
    this.staging.clear();
    this.shared.tags.delete(this.tag);
    if (this.path === '') await this.transport.close();
  }

  /** Throws the error a call gets when the group can no longer run it (closed or aborted). */
  protected assertUsable(fields: CollectiveErrorFields): void {
    if (this.lifecycle === 'closed') {
      throw new GroupAbortedError(fields, 'the group is closed');
    }
    const reason = this.transport.abortReason;
    if (reason !== null) {
      this.lifecycle = 'aborted';
      // A rank that reaches a mismatched call after a peer detected it shares the mismatch error.
      if (reason.kind === 'mismatch' && reason.tag === this.tag && reason.seq === fields.seq) {
        throw errorFromAbortReason(fields, reason);
      }
      throw new GroupAbortedError(
        fields,
        `the group was aborted earlier by rank ${reason.origin} (${reason.kind}): ${reason.message}`,
        { reason },
      );
    }
  }
}
