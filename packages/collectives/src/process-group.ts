import { ArgumentError, DTypeError, keep, ShapeError, Tensor } from '@webshard/tensor-core';
import type { Comm } from './algorithms/comm.js';
import { broadcastBytes, directAllGather, placeOwn, ringAllGather } from './algorithms/gather.js';
import {
  type SharedStep,
  sharedAllGather,
  sharedAllGatherRegistered,
  sharedAllReduce,
  sharedAllReduceRegistered,
  sharedBroadcast,
  sharedReduceScatter,
  sharedReduceScatterRegistered,
} from './algorithms/shared.js';
import {
  directReduceScatter,
  type ReduceLayout,
  type ReduceMemory,
  reduceStagingBytes,
  ringReduce,
} from './algorithms/reduce.js';
import {
  type AbortReason,
  type CollectiveErrorFields,
  CollectiveError,
  CollectiveMismatchError,
  CollectiveTimeoutError,
  errorFromAbortReason,
  GroupAbortedError,
  TransportAbortedError,
} from './errors.js';
import { checkReduceOp, ReduceArena, type ReduceOp } from './kernels/reduce.js';
import {
  bytesOf,
  type CollectiveData,
  type CommDType,
  describeOperand,
  directView,
  elementBytes,
  hostOperand,
  narrow,
  type OperandInfo,
  overlaps,
  widen,
} from './operand.js';
import { OperandStaging, type StagingStats } from './operand-staging.js';
import { RegisteredMemory } from './registered-memory.js';
import { shardRange } from './shard.js';
import type { SharedArena } from './shared-arena.js';
import type { Transport } from './transport.js';

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

/**
 * A pending collective. Calls on one group run one after another in issue order, so work can be
 * issued early and awaited later (communication overlapping computation); awaiting handles out of
 * order is fine. A failed op rejects its handle with a `CollectiveError`; a handle nobody awaits
 * does not raise an unhandled rejection.
 */
export class Work<T = void> {
  /** Settles when the op has completed (or failed). */
  readonly promise: Promise<T>;
  private settled = false;

  constructor(
    readonly op: string,
    readonly seq: number,
    promise: Promise<T>,
  ) {
    this.promise = promise;
    promise.then(
      () => {
        this.settled = true;
      },
      () => {
        this.settled = true;
      },
    );
  }

  /** Wait for the op; rethrows its error. */
  wait(): Promise<T> {
    return this.promise;
  }

  /** Whether the op has finished, successfully or not. */
  get isCompleted(): boolean {
    return this.settled;
  }
}

/**
 * Whether a reduce-scatter's input and output can take the registered path: both are host memory
 * (arrays, or CPU tensors over host memory) and the output does not lie inside the input, which
 * other ranks read while this rank writes it.
 */
function registeredShards(input: OperandInfo, output: OperandInfo): boolean {
  const view = (info: OperandInfo) =>
    info.data instanceof Tensor ? directView(info.data, info.dtype) : info.data;
  const a = view(input);
  const b = view(output);
  return a !== null && b !== null && !overlaps(bytesOf(a), bytesOf(b));
}

/** The lifecycle of a group. `aborted` and `closed` are final. */
export type GroupState = 'ready' | 'aborted' | 'closed';

const OP_CODES: Record<string, number> = {
  allReduce: 1,
  allGather: 2,
  reduceScatter: 3,
  broadcast: 4,
  barrier: 5,
  send: 6,
  recv: 6,
};
const OP_NAMES = [
  '?',
  'allReduce',
  'allGather',
  'reduceScatter',
  'broadcast',
  'barrier',
  'send/recv',
];
const DTYPE_CODES: Record<string, number> = { none: 0, f32: 1, f16: 2, bf16: 3, i32: 4 };
const DTYPE_NAMES = ['none', 'f32', 'f16', 'bf16', 'i32'];
const REDUCE_NAMES = ['sum', 'avg', 'max', 'min', 'product'];
const FINGERPRINT_MAGIC = 0x57534643; // "WSFC"
const FINGERPRINT_WORDS = 6;
/** Words per rank in `SharedArena.exchange`'s result. */
const SHARED_EXCHANGE_STRIDE = 16;
/** `segmentBytes: 'auto'`: the smallest ring segment, and how far it may grow for large ops. */
const AUTO_SEGMENT_BYTES = 1 << 20;
const AUTO_SEGMENT_GROWTH = 4;
/** Ring receives posted ahead, in segments of the smallest size (see [Note: ring segments and window]). */
const RING_WINDOW = 16;

interface FingerprintInit {
  readonly op: string;
  readonly dtype: CommDType | 'none';
  readonly count: number;
  /** Reduce op index, root, or 0. */
  readonly extra: number;
  /**
   * Byte offset of the operand in the shared arena when it is a registered buffer, else -1: sent
   * beside the fingerprint through the arena, not compared (see [Note: registered buffers]).
   */
  readonly registered?: number;
}

function describeFingerprint(words: Int32Array, offset: number): string {
  if (words[offset] !== FINGERPRINT_MAGIC) return 'an unrecognized message';
  const op = OP_NAMES[words[offset + 1]!] ?? '?';
  const seq = words[offset + 2]!;
  const dtype = DTYPE_NAMES[words[offset + 3]!] ?? '?';
  const count = words[offset + 4]!;
  const extra = words[offset + 5]!;
  let detail = '';
  if (op === 'allReduce' || op === 'reduceScatter') detail = `${REDUCE_NAMES[extra] ?? '?'}, `;
  if (op === 'broadcast') detail = `root ${extra}, `;
  return `${op}(${detail}${dtype} x ${count}) as op #${seq}`;
}

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

const noop = () => {};

/** A receive of the op's body waiting for the peer's fingerprint to be checked. */
interface HeldRecv {
  readonly dst: Uint8Array;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/**
 * The running op's view of the group: its fields for errors, the receives it waits for (for the
 * timeout message) and its deadline.
 */
class OpContext implements Comm {
  readonly waiting = new Map<number, number>();
  private readonly gated = new Map<number, HeldRecv[]>();
  ownError: CollectiveError | null = null;
  /** Every rank's words of the shared-memory fingerprint exchange, when the op had one. */
  sharedWords: Int32Array | null = null;
  /**
   * Rejects once the transport is aborted (by this op's deadline or anything else), whatever the
   * op's body is waiting for: see [Note: ordering, deadlines and abort], the backstop.
   */
  readonly aborted: Promise<never>;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private unsubscribe: () => void = noop;

  constructor(
    private readonly group: ProcessGroup,
    readonly fields: CollectiveErrorFields,
    readonly timeoutMs: number,
  ) {
    this.aborted = new Promise<never>((_, reject) => {
      this.unsubscribe = group.transport.onAbort((reason) =>
        reject(new TransportAbortedError(reason)),
      );
    });
    this.aborted.catch(noop);
    this.timer = setTimeout(() => this.expire(), timeoutMs);
  }

  get rank(): number {
    return this.group.rank;
  }

  get size(): number {
    return this.group.size;
  }

  send(peer: number, data: Uint8Array): Promise<void> {
    const promise = this.group.transport.send(this.group.ranks[peer]!, this.group.tag, data);
    promise.catch(noop);
    return promise;
  }

  recv(peer: number, dst: Uint8Array): Promise<void> {
    return this.receive(peer, dst, this.gated.get(peer));
  }

  /**
   * The receive of `peer`'s fingerprint: never held, with `onArrive` as the transport's arrival
   * hint (rule 9 of [Note: the transport contract]).
   */
  recvFingerprint(peer: number, dst: Uint8Array, onArrive: () => void): Promise<void> {
    return this.receive(peer, dst, undefined, onArrive);
  }

  private receive(
    peer: number,
    dst: Uint8Array,
    queue: HeldRecv[] | undefined,
    onArrive?: () => void,
  ): Promise<void> {
    this.waiting.set(peer, (this.waiting.get(peer) ?? 0) + 1);
    const received =
      queue === undefined
        ? this.group.transport.recv(this.group.ranks[peer]!, this.group.tag, dst, onArrive)
        : new Promise<void>((resolve, reject) => queue.push({ dst, resolve, reject }));
    const promise = received.then(() => {
      const left = (this.waiting.get(peer) ?? 1) - 1;
      if (left === 0) this.waiting.delete(peer);
      else this.waiting.set(peer, left);
    });
    promise.catch(noop);
    return promise;
  }

  /** Hold the op's receives from `peer` until `open(peer)`: its fingerprint is not checked yet. */
  gate(peer: number): void {
    this.gated.set(peer, []);
  }

  /** `peer`'s fingerprint matched: post its held receives, in the order the op made them. */
  open(peer: number): void {
    const queue = this.gated.get(peer);
    if (queue === undefined) return;
    this.gated.delete(peer);
    const source = this.group.ranks[peer]!;
    for (const held of queue) {
      this.group.transport.recv(source, this.group.tag, held.dst).then(held.resolve, held.reject);
    }
  }

  /** The fingerprint exchange failed: fail the held receives with its error. */
  failGated(error: unknown): void {
    for (const queue of this.gated.values()) for (const held of queue) held.reject(error);
    this.gated.clear();
  }

  /** Record the ranks a shared-memory barrier waits for (for the deadline's message). */
  waitFor(ranks: readonly number[]): void {
    this.waiting.clear();
    for (const rank of ranks) this.waiting.set(rank, 1);
  }

  private expire(): void {
    this.timer = null;
    const waitingFor = [...this.waiting.keys()].sort((a, b) => a - b);
    const who =
      waitingFor.length === 0
        ? 'while sending (the receivers are not draining)'
        : `waiting for rank${waitingFor.length > 1 ? 's' : ''} ${waitingFor.join(', ')}`;
    const message = `timed out after ${this.timeoutMs} ms ${who}`;
    const reason: AbortReason = {
      kind: 'timeout',
      origin: this.group.transport.rank,
      op: this.fields.op,
      seq: this.fields.seq,
      peers: waitingFor.map((peer) => this.group.ranks[peer]!),
      message: `${this.fields.op} #${this.fields.seq} on rank ${this.fields.rank} ${message}`,
    };
    this.ownError = new CollectiveTimeoutError(
      { ...this.fields, peer: waitingFor[0] },
      this.timeoutMs,
      waitingFor,
      message,
      { reason },
    );
    this.group.transport.abort(reason);
  }

  finish(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.unsubscribe();
  }
}

/**
 * A group of ranks that run collectives together, on a `Transport`.
 *
 * [Note: ordering, deadlines and abort]
 * Ordering: every call gets the next sequence number of its group when it is made, and runs only
 * after the group's previous call has finished, so calls complete in issue order and the ranks'
 * k-th calls meet each other. Each op first sends a fingerprint (op, sequence number, dtype,
 * element count, reduce op or root) to every other rank of the group (24 bytes each), and accepts
 * no data from a peer before that peer's fingerprint has matched (see [Note: fingerprints ahead of
 * the data]). A rank whose fingerprints differ from a peer's aborts the transport with a
 * `mismatch` reason naming both calls; every rank of the group then fails with
 * `CollectiveMismatchError` before any payload with a wrong size could be received. The all-to-all
 * fingerprint is also the barrier, and it tells a timed-out barrier exactly which ranks never
 * arrived. Deadlines: each op arms a timer when it starts; when it fires, the rank aborts the
 * transport with a `timeout` reason listing the ranks it was still waiting for. Abort: a transport
 * abort (deadline, mismatch, dead peer, `abort()`) reaches every rank of the transport, and each
 * pending op turns the shared reason into the same typed error (`errorFromAbortReason`). The
 * failure is final for every group on the transport (as NCCL aborts a communicator): later calls
 * reject with `GroupAbortedError`. The backstop: a pending op settles when the transport aborts,
 * even if its body still waits on a send or receive that the transport failed to reject (a
 * transport bug, or a user buffer the body is stuck on), so no op outlives its deadline; a body
 * left running after that only touches a transport that refuses all further use. One failure
 * poisoning all groups is deliberate: after a failed collective the ranks no longer agree on what
 * has been exchanged, and only a fresh start is safe.
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
  private readonly arena = new ReduceArena();
  /** Registered buffers on `tcp` (see [Note: registered memory on the tcp transport]). */
  private registeredMemory: RegisteredMemory | null = null;
  private readonly fingerprintOut = new Int32Array(FINGERPRINT_WORDS);
  private readonly sharedFingerprintOut = new Int32Array(FINGERPRINT_WORDS + 1);
  /** Registered buffers this rank allocated (for `free`), by the array handed out. */
  private readonly registered = new WeakMap<object, { offset: number; bytes: number }>();
  /** Tensors pinned by the call being issued, handed to its work by `schedule`. */
  private readonly pinned: Tensor[] = [];
  /** Host arrays for tensor operands: see [Note: operand staging]. */
  private readonly staging = new OperandStaging();
  private fingerprintIn = new Int32Array(0);
  private seq = 0;
  /** Point-to-point sequence numbers per peer, one counter per direction: `send` to / `recv` from. */
  private readonly p2pSeq = { send: new Map<number, number>(), recv: new Map<number, number>() };
  private children = 0;
  private tail: Promise<unknown> = Promise.resolve();
  private lifecycle: GroupState = 'ready';

  /** The group of all ranks of `transport` (its world). Create one per transport. */
  static fromTransport(transport: Transport, options: ProcessGroupOptions = {}): ProcessGroup {
    const ranks = Array.from({ length: transport.size }, (_, i) => i);
    return new ProcessGroup(transport, ranks, '', options);
  }

  private constructor(
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
   * A sub-group of this group's ranks `ranks` (group ranks, ascending, no repeats), for hybrid
   * sharding. Every rank of THIS group must call `newGroup` with the same arguments in the same
   * order (no communication happens: the sub-group's tag comes from its position); members get
   * the new group, the other ranks `null`. Groups run independently, each with its own order.
   */
  newGroup(ranks: readonly number[], options: ProcessGroupOptions = {}): ProcessGroup | null {
    for (let i = 0; i < ranks.length; i++) {
      const r = ranks[i]!;
      if (!Number.isInteger(r) || r < 0 || r >= this.size || (i > 0 && r <= ranks[i - 1]!)) {
        throw new ArgumentError(
          'newGroup',
          `ranks must be ascending distinct ranks of a group of ${this.size}, got [${ranks.join(', ')}]`,
        );
      }
    }
    if (ranks.length === 0) throw new ArgumentError('newGroup', 'a group needs at least one rank');
    const path = `${this.path}/${this.children++}`;
    if (!ranks.includes(this.rank)) return null;
    return new ProcessGroup(
      this.transport,
      ranks.map((r) => this.ranks[r]!),
      path,
      { ...this.options, ...options },
    );
  }

  /**
   * [Note: registered buffers]
   * A buffer for this group's collectives, like NCCL's `ncclMemAlloc`. On the `shm` transport's
   * world group it lies in the shared arena that every rank maps, so an all-reduce whose operands
   * are registered buffers on every rank runs in place: each rank reduces its 1/n slice straight
   * from every rank's buffer into rank 0's (in rank order, as the copying schedule does, so the
   * bits are the same) and copies the result into the others', with no copy into or out of the
   * arena (`sharedAllReduceRegistered`); the ranks learn each other's offsets with the
   * fingerprint. A reduce-scatter of registered inputs sums this rank's shard straight from every
   * input (into the output when that is registered too), and an all-gather into registered outputs
   * writes each rank's shard straight into the others' outputs; an output inside its own input
   * falls back to copying. On `tcp` it lives in shared WASM memory of the group: an all-reduce of
   * it runs in place, and a reduce-scatter reads it in place (see [Note: registered memory on the
   * tcp transport]). Elsewhere (`ws`,
   * `local`, shm sub-groups, a single rank) it is an ordinary typed array, so code that allocates
   * its buckets here runs on every transport. Release it with `free`; using it after that is
   * undefined, as with any freed memory.
   */
  allocate(dtype: 'f32', count: number): Float32Array;
  allocate(dtype: 'i32', count: number): Int32Array;
  allocate(dtype: 'f16' | 'bf16', count: number): Uint16Array;
  allocate(dtype: 'f32' | 'i32', count: number): Float32Array | Int32Array;
  allocate(dtype: CommDType, count: number): Float32Array | Int32Array | Uint16Array;
  allocate(dtype: CommDType, count: number): Float32Array | Int32Array | Uint16Array {
    if (!Number.isSafeInteger(count) || count < 0) {
      throw new ArgumentError('allocate', `count must be a non-negative integer, got ${count}`);
    }
    const element = dtype === 'f16' || dtype === 'bf16' ? 2 : 4;
    const make = (buffer: ArrayBufferLike, offset: number) =>
      element === 2
        ? new Uint16Array(buffer, offset, count)
        : dtype === 'i32'
          ? new Int32Array(buffer, offset, count)
          : new Float32Array(buffer, offset, count);
    const arena = this.registeredArena() ?? this.tcpRegisteredMemory(true);
    if (arena === null) return make(new ArrayBuffer(count * element), 0);
    const bytes = count * element;
    const offset = arena.allocate(bytes);
    const array = make(arena.buffer, offset);
    array.fill(0);
    this.registered.set(array, { offset, bytes });
    return array;
  }

  /** Releases a buffer from `allocate` (a no-op for ordinary arrays). */
  free(buffer: Float32Array | Int32Array | Uint16Array): void {
    const entry = this.registered.get(buffer);
    const arena = this.registeredArena() ?? this.tcpRegisteredMemory(false);
    if (entry === undefined || arena === null) return;
    this.registered.delete(buffer);
    arena.release(entry.offset, entry.bytes);
  }

  /**
   * Where registered buffers live on `tcp`, created on first use (`create`); null on other
   * transports and for a single rank.
   */
  private tcpRegisteredMemory(create: boolean): RegisteredMemory | null {
    if (this.registeredMemory !== null || !create) return this.registeredMemory;
    if (this.transport.kind !== 'tcp' || this.size === 1) return null;
    // Receive slots and, for a registered reduce-scatter, as many forward slots (`ringReduce`).
    this.registeredMemory = new RegisteredMemory(2 * this.ringStagingBytes() + 64, this.rank);
    return this.registeredMemory;
  }

  /** The arena registered buffers live in, when this group runs collectives through one. */
  private registeredArena(): SharedArena | null {
    const arena = this.transport.sharedArena;
    if (arena === undefined || !this.options.sharedMemory || this.path !== '' || this.size === 1)
      return null;
    return arena;
  }

  /**
   * The operand's byte offset in the shared arena, or -1 when it is not registered memory (or, for
   * the reductions, not of a 4-byte dtype the kernels reduce in place).
   */
  private registeredOffset(info: OperandInfo, anyDtype = false): number {
    const arena = this.registeredArena();
    if (arena === null) return -1;
    if (!anyDtype && info.dtype !== 'f32' && info.dtype !== 'i32') return -1;
    // A CPU tensor over a registered buffer (tensorFromHostArray) counts as that buffer.
    const data = info.data instanceof Tensor ? directView(info.data, info.dtype) : info.data;
    if (data === null) return -1;
    return arena.owns(data.buffer) ? data.byteOffset : -1;
  }

  /** Every rank's registered offset from the op's fingerprint exchange, or null unless all are. */
  private registeredOffsets(ctx: OpContext): number[] | null {
    const words = ctx.sharedWords;
    if (words === null) return null;
    const offsets: number[] = [];
    for (let peer = 0; peer < this.size; peer++) {
      const offset = words[peer * SHARED_EXCHANGE_STRIDE + FINGERPRINT_WORDS]!;
      if (offset < 0) return null;
      offsets.push(offset);
    }
    return offsets;
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
    const info = this.pin(described);
    return this.enqueue(
      {
        op: 'allReduce',
        dtype: info.dtype,
        count: info.count,
        extra: REDUCE_NAMES.indexOf(op),
        registered: this.registeredOffset(info),
      },
      options,
      async (ctx) => {
        const operand = await hostOperand('allReduce', info, false, this.staging);
        const count = info.count;
        const step = this.sharedStep(ctx);
        const offsets = this.registeredOffsets(ctx);
        if (step !== null && offsets !== null) {
          await sharedAllReduceRegistered(step, info.dtype as 'f32' | 'i32', offsets, count, op);
          return;
        }
        if (step !== null) {
          await sharedAllReduce(step, info.dtype, operand.host, op);
          operand.commit();
          return;
        }
        if (this.size === 1 || count === 0) {
          operand.commit();
          return;
        }
        const direct = count * 4 <= this.options.smallMessageBytes;
        const scale = op === 'avg' ? 1 / this.size : null;
        const memory = this.registeredMemory;
        const host = operand.host;
        if (
          !direct &&
          memory !== null &&
          !(host instanceof Uint16Array) &&
          memory.owns(host.buffer)
        ) {
          // [Note: registered memory on the tcp transport]: the ring runs on the buffer itself.
          const layout = this.ringLayout(memory, op, info.dtype, count, host.byteOffset);
          await ringReduce(ctx, layout, this.elementChunk(count), {
            input: null,
            result: null,
            resultBase: 0,
            gather: bytesOf(host),
            scale,
          });
          return;
        }
        if (!direct && (info.dtype === 'f32' || info.dtype === 'i32')) {
          // [Note: the fused ring]: the user's buffer is read, reduced into and gathered in place.
          const bytes = bytesOf(operand.host);
          await ringReduce(
            ctx,
            this.streamedLayout(op, info.dtype, count),
            this.elementChunk(count),
            {
              input: bytes,
              result: bytes,
              resultBase: 0,
              gather: bytes,
              scale,
            },
          );
          operand.commit();
          return;
        }
        const layout = this.layout(op, info.dtype, count, direct ? count : 0);
        widen(info.dtype, operand.host, this.workView(layout, count));
        if (direct) {
          await directReduceScatter(ctx, layout, () => [0, count]);
          if (scale !== null) this.arena.scale(layout.work, count, scale);
          narrow(info.dtype, this.workView(layout, count), operand.host);
          operand.commit();
          return;
        }
        // f16/bf16: reduce-scatter in f32, round this rank's chunk once, and gather the 16-bit
        // results (half the bytes of gathering f32); every rank gets the owner's rounding.
        const chunk = this.elementChunk(count);
        await ringReduce(ctx, layout, chunk, {
          input: null,
          result: null,
          resultBase: 0,
          gather: null,
          scale,
        });
        const [start, length] = chunk(this.rank);
        const bits = operand.host as Uint16Array;
        narrow(
          info.dtype,
          this.arena.f32(layout.work + start * 4, length),
          bits.subarray(start, start + length),
        );
        await ringAllGather(
          ctx,
          bytesOf(bits),
          bytesOf(bits.subarray(start, start + length)),
          (c) => {
            const [first, size] = chunk(c);
            return [first * 2, size * 2];
          },
          this.segmentBytes(2, length * 2),
        );
        operand.commit();
      },
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
    this.checkShard('allGather', inDescribed, outDescribed, 'input');
    const inInfo = this.pin(inDescribed);
    const outInfo = this.pin(outDescribed);
    return this.enqueue(
      {
        op: 'allGather',
        dtype: outInfo.dtype,
        count: outInfo.count,
        extra: 0,
        registered: this.registeredOffset(outInfo, true),
      },
      options,
      async (ctx) => {
        const [source, target] = await Promise.all([
          hostOperand('allGather', inInfo, false, this.staging),
          hostOperand('allGather', outInfo, true, this.staging),
        ]);
        const element = elementBytes(outInfo.dtype);
        const chunk = (c: number): [number, number] => {
          const range = shardRange(outInfo.count, this.size, c);
          return [range.start * element, range.count * element];
        };
        const bytes = bytesOf(target.host);
        let own = bytesOf(source.host);
        if (overlaps(own, bytes)) {
          // An input inside the output but not at its place would be overwritten while it is
          // sent: put it in place first (`set` copies overlapping ranges correctly).
          const [start, length] = chunk(this.rank);
          placeOwn(bytes, own, start);
          own = bytes.subarray(start, start + length);
        }
        const step = this.sharedStep(ctx);
        const offsets = this.registeredOffsets(ctx);
        if (step !== null) {
          placeOwn(bytes, own, chunk(this.rank)[0]);
          if (offsets !== null) await sharedAllGatherRegistered(step, own, offsets, chunk);
          else await sharedAllGather(step, own, bytes, chunk);
        } else if (bytes.byteLength <= this.options.smallMessageBytes)
          await directAllGather(ctx, bytes, own, chunk);
        else await ringAllGather(ctx, bytes, own, chunk, this.segmentBytes(element, chunk(0)[1]));
        target.commit();
      },
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
    this.checkShard('reduceScatter', outDescribed, inDescribed, 'output');
    const op = options.op ?? 'sum';
    checkReduceOp('reduceScatter', op, inDescribed.dtype);
    const inInfo = this.pin(inDescribed);
    const outInfo = this.pin(outDescribed);
    return this.enqueue(
      {
        op: 'reduceScatter',
        dtype: inInfo.dtype,
        count: inInfo.count,
        extra: REDUCE_NAMES.indexOf(op),
        // An output inside the input would be written while other ranks read it: copy instead.
        registered: registeredShards(inInfo, outInfo) ? this.registeredOffset(inInfo) : -1,
      },
      options,
      async (ctx) => {
        const [source, target] = await Promise.all([
          hostOperand('reduceScatter', inInfo, false, this.staging),
          hostOperand('reduceScatter', outInfo, true, this.staging),
        ]);
        const count = inInfo.count;
        const step = this.sharedStep(ctx);
        const offsets = this.registeredOffsets(ctx);
        if (step !== null && offsets !== null) {
          const outputOffset = this.registeredOffset(outInfo);
          await sharedReduceScatterRegistered(
            step,
            inInfo.dtype as 'f32' | 'i32',
            offsets,
            count,
            target.host,
            outputOffset,
            op,
          );
          target.commit();
          return;
        }
        if (step !== null) {
          await sharedReduceScatter(step, inInfo.dtype, source.host, target.host, op);
          target.commit();
          return;
        }
        const direct = count * 4 <= this.options.smallMessageBytes;
        const chunk = this.elementChunk(count);
        const [start, length] = chunk(this.rank);
        const scale = op === 'avg' ? 1 / this.size : null;
        const input = bytesOf(source.host);
        const output = bytesOf(target.host);
        const memory = this.registeredMemory;
        const ring =
          !direct &&
          this.size > 1 &&
          (inInfo.dtype === 'f32' || inInfo.dtype === 'i32') &&
          !overlaps(input, output);
        if (ring) {
          // Reads `input` piece by piece while writing `output`: only for separate buffers. A
          // registered input is read in place ([Note: registered memory on the tcp transport]).
          const registered = memory?.owns(input.buffer) === true;
          await ringReduce(
            ctx,
            registered
              ? this.ringLayout(memory, op, inInfo.dtype, count, -1)
              : this.streamedLayout(op, inInfo.dtype, count),
            chunk,
            {
              input,
              result: output,
              resultBase: start,
              gather: null,
              scale,
              registered: registered
                ? { result: memory.owns(output.buffer) ? output.byteOffset : -1 }
                : undefined,
            },
          );
          target.commit();
          return;
        }
        const layout = this.layout(
          op,
          inInfo.dtype,
          count,
          direct ? Math.ceil(count / this.size) : 0,
        );
        widen(inInfo.dtype, source.host, this.workView(layout, count));
        if (this.size > 1 && count > 0) {
          if (direct) {
            await directReduceScatter(ctx, layout, chunk);
            if (scale !== null) this.arena.scale(layout.work + start * 4, length, scale);
          } else {
            await ringReduce(ctx, layout, chunk, {
              input: null,
              result: null,
              resultBase: 0,
              gather: null,
              scale,
            });
          }
        } else if (scale !== null) {
          this.arena.scale(layout.work + start * 4, length, scale);
        }
        const shard =
          layout.dtype === 'i32'
            ? this.arena.i32(layout.work + start * 4, length)
            : this.arena.f32(layout.work + start * 4, length);
        narrow(inInfo.dtype, shard, target.host);
        target.commit();
      },
    );
  }

  /** Copy `data` of rank `root` into `data` on every rank. Any dtype, bit for bit. */
  broadcast(data: CollectiveData, root: number, options: OpOptions = {}): Work {
    const described = describeOperand('broadcast', data, options.dtype);
    this.checkPeer('broadcast', root, true);
    const info = this.pin(described);
    return this.enqueue(
      { op: 'broadcast', dtype: info.dtype, count: info.count, extra: root },
      options,
      async (ctx) => {
        const operand = await hostOperand('broadcast', info, this.rank !== root, this.staging);
        const bytes = bytesOf(operand.host);
        const step = this.sharedStep(ctx);
        if (step !== null) await sharedBroadcast(step, bytes, root);
        else
          await broadcastBytes(
            ctx,
            bytes,
            root,
            this.segmentBytes(elementBytes(info.dtype), bytes.byteLength),
            bytes.byteLength <= this.options.smallMessageBytes,
          );
        if (this.rank !== root) operand.commit();
      },
    );
  }

  /**
   * Wait until every rank of the group has called `barrier`. A barrier that times out lists the
   * ranks that never arrived.
   */
  barrier(options: OpOptions = {}): Work {
    return this.enqueue(
      { op: 'barrier', dtype: 'none', count: 0, extra: 0 },
      options,
      async () => {},
    );
  }

  /**
   * Send `data` to group rank `peer`, which must call `recv` with the same dtype and element
   * count. Point-to-point ops take their turn in the group's order like collectives.
   */
  send(data: CollectiveData, peer: number, options: OpOptions = {}): Work {
    const described = describeOperand('send', data, options.dtype);
    this.checkPeer('send', peer, false);
    const info = this.pin(described);
    return this.enqueuePeer('send', peer, info, options, async (ctx) => {
      const operand = await hostOperand('send', info, false, this.staging);
      await ctx.send(peer, bytesOf(operand.host));
    });
  }

  /** Receive into `data` what group rank `peer` sends with `send`. */
  recv(data: CollectiveData, peer: number, options: OpOptions = {}): Work {
    const described = describeOperand('recv', data, options.dtype);
    this.checkPeer('recv', peer, false);
    const info = this.pin(described);
    return this.enqueuePeer('recv', peer, info, options, async (ctx) => {
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
   * Wait for the ops already issued, then refuse further ones. Closing the world group (the one
   * from `fromTransport`) also closes the transport.
   */
  async close(): Promise<void> {
    if (this.lifecycle === 'closed') return;
    await this.tail;
    this.lifecycle = 'closed';
    this.staging.clear();
    this.shared.tags.delete(this.tag);
    if (this.path === '') await this.transport.close();
  }

  /** Host memory this group keeps for tensor operands ([Note: operand staging]). */
  stagingStats(): StagingStats {
    return this.staging.stats();
  }

  /** The shared-memory schedule's view of the op, when this group runs collectives that way. */
  private sharedStep(ctx: OpContext): SharedStep | null {
    const arena: SharedArena | undefined = this.transport.sharedArena;
    if (arena === undefined || !this.options.sharedMemory || this.path !== '' || this.size === 1)
      return null;
    return {
      rank: this.rank,
      size: this.size,
      arena,
      barrier: async () => {
        await arena.barrier((ranks) => ctx.waitFor(ranks));
        ctx.waitFor([]);
      },
    };
  }

  /** The smallest segment, and the only one when `segmentBytes` is a number. */
  private baseSegmentBytes(): number {
    const { segmentBytes } = this.options;
    return segmentBytes === 'auto' ? AUTO_SEGMENT_BYTES : segmentBytes;
  }

  /** Staging the ring's receive slots may take (see the Note below). */
  private ringStagingBytes(): number {
    return RING_WINDOW * this.baseSegmentBytes();
  }

  /** The segment for pipelining `chunkBytes` per rank, in bytes; see the Note below. */
  private segmentFor(chunkBytes: number): number {
    const base = this.baseSegmentBytes();
    if (this.options.segmentBytes !== 'auto' || chunkBytes <= 8 * base) return base;
    const grown = 2 ** Math.ceil(Math.log2(chunkBytes / 8));
    return Math.min(AUTO_SEGMENT_GROWTH * base, grown);
  }

  /** Segment bytes (whole elements) for byte-moving schedules over chunks of `chunkBytes`. */
  private segmentBytes(element: number, chunkBytes: number): number {
    const segment = this.segmentFor(chunkBytes);
    return Math.max(element, Math.floor(segment / element) * element);
  }

  /**
   * The arena layout of one reducing op.
   *
   * [Note: ring segments and window]
   * Segments are 1 MiB by default (`segmentBytes: 'auto'`). Smaller segments for small ops (a
   * quarter of a chunk, so a 1 MiB all-reduce on two ranks would stream four 128 KiB segments)
   * measured slower on loopback tcp, 0.95-1.6 ms against 0.3-0.9 ms: each message costs a wake-up
   * of a process that shares its core. For the same reason large ops use larger segments: from
   * 8 MiB per rank's chunk, an eighth of it (a power of two), up to 4 MiB, so a chunk still streams
   * in at least two segments. A registered 64 MiB all-reduce on four tcp ranks of the 2-core
   * development machine took 139-140 ms with 2 MiB segments against 164-175 ms with 1 MiB ones,
   * with half the user CPU (per-message work: wake-ups, headers, promises); at two ranks wall time
   * did not change but user CPU halved too. A `segmentBytes` number fixes the size. Receives are
   * posted ahead into staging slots, up to 16 of the smallest segment's size in all (16 slots of
   * 1 MiB, 4 of 4 MiB): enough that a peer's burst of sends lands in its slots (received in place)
   * rather than in the transport's copy of unexpected messages.
   */
  private layout(
    op: ReduceOp,
    dtype: CommDType,
    count: number,
    directElements: number,
  ): ReduceLayout {
    const { segmentElements, window } = this.ringShape(count);
    const workBytes = Math.ceil((count * 4) / 16) * 16;
    const direct = directElements > 0;
    const staging = reduceStagingBytes(direct, directElements, this.size, segmentElements, window);
    this.arena.ensure(workBytes + staging + 16);
    return {
      arena: this.arena,
      op,
      dtype: dtype === 'i32' ? 'i32' : 'f32',
      work: 0,
      staging: workBytes,
      segmentElements,
      window,
    };
  }

  /**
   * The layout of a ring that reads its input piece by piece (`RingOperands.input`) or runs on
   * registered memory: staging at the memory's start, receive slots then as many forward slots
   * (see [Note: ring operands in staging]), the operand at `work` (-1 when the ring only reads it).
   */
  private ringLayout(
    memory: ReduceMemory,
    op: ReduceOp,
    dtype: CommDType,
    count: number,
    work: number,
  ): ReduceLayout {
    return {
      arena: memory,
      op,
      dtype: dtype === 'i32' ? 'i32' : 'f32',
      work,
      staging: 0,
      ...this.ringShape(count),
    };
  }

  /** `ringLayout` in the group's arena, for an input outside it: only staging, no work region. */
  private streamedLayout(op: ReduceOp, dtype: CommDType, count: number): ReduceLayout {
    const layout = this.ringLayout(this.arena, op, dtype, count, -1);
    this.arena.ensure(2 * layout.window * layout.segmentElements * 4 + 16);
    return layout;
  }

  /** Ring segments (elements) and receives posted ahead for `count` elements; see the Note above. */
  private ringShape(count: number): { segmentElements: number; window: number } {
    const chunkElements = Math.ceil(count / this.size);
    const segmentBytes = this.segmentFor(chunkElements * 4);
    const segmentElements = Math.max(4, Math.floor(segmentBytes / 16) * 4);
    const segmentsPerChunk = Math.ceil(chunkElements / segmentElements);
    const slots = Math.floor(this.ringStagingBytes() / (segmentElements * 4));
    const window = Math.max(1, Math.min(slots, (this.size - 1) * segmentsPerChunk));
    return { segmentElements, window };
  }

  /** Chunk `c` of `count` elements as `[start, length]` in elements (`shardRange`). */
  private elementChunk(count: number): (c: number) => [number, number] {
    return (c) => {
      const range = shardRange(count, this.size, c);
      return [range.start, range.count];
    };
  }

  private workView(layout: ReduceLayout, count: number): Float32Array | Int32Array {
    return layout.dtype === 'i32'
      ? this.arena.i32(layout.work, count)
      : this.arena.f32(layout.work, count);
  }

  private checkShard(
    op: string,
    shard: OperandInfo,
    full: OperandInfo,
    which: 'input' | 'output',
  ): void {
    if (shard.dtype !== full.dtype) {
      throw new DTypeError(op, [shard.dtype, full.dtype], 'input and output dtypes differ');
    }
    const expected = shardRange(full.count, this.size, this.rank).count;
    if (shard.count !== expected) {
      throw new ShapeError(
        op,
        [[shard.count], [full.count]],
        `rank ${this.rank}: expected ${which} of ${expected} elements (shard ${this.rank} of ${full.count} over ${this.size} ranks), got ${shard.count}`,
      );
    }
  }

  private checkPeer(op: string, peer: number, selfAllowed: boolean): void {
    if (
      !Number.isInteger(peer) ||
      peer < 0 ||
      peer >= this.size ||
      (!selfAllowed && peer === this.rank)
    ) {
      throw new ArgumentError(
        op,
        `rank ${this.rank}: ${peer} is not a ${selfAllowed ? '' : 'peer '}rank of a group of ${this.size}`,
      );
    }
  }

  /**
   * [Note: operands are held until the op settles]
   * A collective reads its operands when it runs, which may be after calls issued before it on
   * the group (ops run in issue order), as in PyTorch: do not write an input or read an output
   * before the op's `wait()`. What is guaranteed is that the memory stays: a tensor operand is
   * pinned at the call (a second handle on its storage, like PyTorch's `record_stream`), so a
   * `free()` of the caller's tensor before the op settles only drops the caller's handle, and the
   * storage goes back to its allocator once the op has settled. Host arrays are the caller's.
   */
  private pin(info: OperandInfo): OperandInfo {
    if (!(info.data instanceof Tensor)) return info;
    const alias = keep(info.data.detach());
    alias.name = info.data.name;
    this.pinned.push(alias);
    return { ...info, data: alias };
  }

  private enqueue(
    fingerprint: FingerprintInit,
    options: OpOptions,
    body: (ctx: OpContext) => Promise<void>,
  ): Work {
    const seq = this.seq++;
    const peers = Array.from({ length: this.size }, (_, i) => i).filter((r) => r !== this.rank);
    return this.schedule(fingerprint.op, seq, peers, peers, fingerprint, options, body);
  }

  private enqueuePeer(
    op: 'send' | 'recv',
    peer: number,
    info: OperandInfo,
    options: OpOptions,
    body: (ctx: OpContext) => Promise<void>,
  ): Work {
    const counters = this.p2pSeq[op];
    const seq = counters.get(peer) ?? 0;
    counters.set(peer, seq + 1);
    const fingerprint: FingerprintInit = { op, dtype: info.dtype, count: info.count, extra: 0 };
    const sendTo = op === 'send' ? [peer] : [];
    const recvFrom = op === 'recv' ? [peer] : [];
    return this.schedule(op, seq, sendTo, recvFrom, fingerprint, options, body);
  }

  private schedule(
    op: string,
    seq: number,
    sendTo: readonly number[],
    recvFrom: readonly number[],
    fingerprint: FingerprintInit,
    options: OpOptions,
    body: (ctx: OpContext) => Promise<void>,
  ): Work {
    const fields: CollectiveErrorFields = { op, rank: this.rank, seq };
    const timeoutMs = options.timeoutMs ?? this.options.timeoutMs;
    // The tensors pinned by this call ([Note: operands are held until the op settles]).
    const pinned = this.pinned.splice(0);
    const run = async () => {
      this.assertUsable(fields);
      const ctx = new OpContext(this, fields, timeoutMs);
      const exchange = async () => {
        if (this.fingerprintsShared(fingerprint)) {
          await this.exchangeFingerprints(ctx, seq, sendTo, recvFrom, fingerprint);
          await body(ctx);
        } else {
          // See [Note: fingerprints ahead of the data].
          await Promise.all([
            this.exchangeFingerprints(ctx, seq, sendTo, recvFrom, fingerprint),
            body(ctx),
          ]);
        }
      };
      try {
        await Promise.race([exchange(), ctx.aborted]);
      } catch (error) {
        throw this.translate(error, ctx);
      } finally {
        ctx.finish();
      }
    };
    const promise = this.tail.then(run);
    this.tail = promise.catch(noop);
    const unpin = () => {
      for (const t of pinned) t.free();
      this.staging.recycle();
    };
    promise.then(unpin, unpin);
    return new Work(op, seq, promise);
  }

  private assertUsable(fields: CollectiveErrorFields): void {
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

  private translate(error: unknown, ctx: OpContext): unknown {
    if (ctx.ownError !== null) return ctx.ownError;
    if (error instanceof TransportAbortedError)
      return errorFromAbortReason(ctx.fields, error.reason);
    if (CollectiveError.isInstance(error)) return error;
    // Anything else (a bug, a tensor freed mid-op) leaves the ranks out of step: abort them all.
    const message = error instanceof Error ? error.message : String(error);
    this.transport.abort({
      kind: 'error',
      origin: this.transport.rank,
      op: ctx.fields.op,
      seq: ctx.fields.seq,
      message: `${ctx.fields.op} #${ctx.fields.seq} failed on rank ${ctx.fields.rank}: ${message}`,
    });
    return error;
  }

  /** Whether an op's fingerprints go through the shared arena (one barrier) instead of messages. */
  private fingerprintsShared(fingerprint: FingerprintInit): boolean {
    if (fingerprint.op === 'send' || fingerprint.op === 'recv') return false;
    return (
      this.transport.sharedArena !== undefined &&
      this.options.sharedMemory &&
      this.path === '' &&
      this.size > 1
    );
  }

  /**
   * [Note: fingerprints ahead of the data]
   * Over messages the fingerprint is the first message of an op to each peer, and the op's body
   * starts at once instead of a round trip later: its sends follow the fingerprint on the wire, and
   * its receives from a peer are held (`OpContext.gate`) until that peer's fingerprint has arrived
   * and matched, then posted in order. The check runs in the transport's arrival hint where it has
   * one (rule 9 of [Note: the transport contract]): the fingerprint and the head of the data
   * usually come in one read, and checked a microtask later the data found no receive posted and
   * was copied aside, one segment per op and peer. A mismatched peer's data therefore never meets a posted
   * receive (it waits in the transport until the abort discards it), so a wrong count still fails
   * as `CollectiveMismatchError`, never as a length error. The shared-memory exchange is a barrier
   * and still runs before the body.
   */
  private async exchangeFingerprints(
    ctx: OpContext,
    seq: number,
    sendTo: readonly number[],
    recvFrom: readonly number[],
    fingerprint: FingerprintInit,
  ): Promise<void> {
    if (sendTo.length === 0 && recvFrom.length === 0) return;
    const out = this.fingerprintOut;
    out[0] = FINGERPRINT_MAGIC;
    out[1] = OP_CODES[fingerprint.op]!;
    out[2] = seq;
    out[3] = DTYPE_CODES[fingerprint.dtype]!;
    out[4] = fingerprint.count;
    out[5] = fingerprint.extra;
    const step = this.fingerprintsShared(fingerprint) ? this.sharedStep(ctx) : null;
    if (step !== null) {
      // Every rank's fingerprint through shared memory: one barrier instead of n - 1 messages.
      const shared = this.sharedFingerprintOut;
      shared.set(out);
      shared[FINGERPRINT_WORDS] = fingerprint.registered ?? -1;
      const all = await step.arena.exchange(shared, (ranks) => ctx.waitFor(ranks));
      ctx.waitFor([]);
      ctx.sharedWords = all;
      for (let peer = 0; peer < this.size; peer++) {
        if (peer === this.rank) continue;
        const at = peer * SHARED_EXCHANGE_STRIDE;
        for (let w = 0; w < FINGERPRINT_WORDS; w++) {
          if (all[at + w] !== out[w])
            this.mismatch(ctx, peer, describeFingerprint(out, 0), describeFingerprint(all, at));
        }
      }
      return;
    }
    if (this.fingerprintIn.length < this.size * FINGERPRINT_WORDS) {
      this.fingerprintIn = new Int32Array(this.size * FINGERPRINT_WORDS);
    }
    const incoming = this.fingerprintIn;
    const outBytes = bytesOf(out);
    const pending: Promise<void>[] = [];
    for (const peer of sendTo) pending.push(ctx.send(peer, outBytes));
    // Checked once per peer: where the transport gives the arrival hint, synchronously as the
    // fingerprint lands (so the held receives are posted before the data behind it is parsed),
    // else when the receive resolves. A mismatch is kept and thrown on the promise path.
    const outcomes = new Map<number, unknown>();
    const check = (peer: number) => {
      if (outcomes.has(peer)) return;
      const at = peer * FINGERPRINT_WORDS;
      try {
        for (let w = 0; w < FINGERPRINT_WORDS; w++) {
          if (incoming[at + w] !== out[w])
            this.mismatch(
              ctx,
              peer,
              describeFingerprint(out, 0),
              describeFingerprint(incoming, at),
            );
        }
        outcomes.set(peer, null);
      } catch (error) {
        outcomes.set(peer, error);
        return;
      }
      ctx.open(peer);
    };
    // The body's receives from a peer wait for that peer's fingerprint (posted after it).
    for (const peer of recvFrom) ctx.gate(peer);
    const checks = recvFrom.map((peer) =>
      ctx
        .recvFingerprint(
          peer,
          new Uint8Array(incoming.buffer, peer * FINGERPRINT_WORDS * 4, FINGERPRINT_WORDS * 4),
          () => check(peer),
        )
        .then(() => {
          check(peer);
          const error = outcomes.get(peer);
          if (error !== null) throw error;
        }),
    );
    try {
      await Promise.all([...checks, ...pending]);
    } catch (error) {
      ctx.failGated(error);
      throw error;
    }
  }

  private mismatch(ctx: OpContext, peer: number, mine: string, theirs: string): never {
    const message = `rank ${this.rank} called ${mine} but rank ${peer} called ${theirs}`;
    const reason: AbortReason = {
      kind: 'mismatch',
      origin: this.transport.rank,
      op: ctx.fields.op,
      seq: ctx.fields.seq,
      tag: this.tag,
      peer: this.ranks[peer],
      message,
    };
    ctx.ownError = new CollectiveMismatchError({ ...ctx.fields, peer }, message, { reason });
    this.transport.abort(reason);
    throw ctx.ownError;
  }
}
