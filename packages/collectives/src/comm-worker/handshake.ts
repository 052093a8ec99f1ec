import type { AbortReason } from '../errors.js';
import type { NetworkTransportOptions } from '../connect-transport.js';
import type { ReduceOp } from '../kernels/reduce.js';
import type { CommDType } from '../operand.js';
import type { ProcessGroupOptions } from '../process-group.js';
import type { ShmHandle } from '../transports/shm/shm-layout.js';

/**
 * [Note: the communication worker handshake]
 * Which thread does what. The rank's thread issues: its `WorkerGroup` checks the call as every
 * group does, numbers it, hands its operands over and returns a `Work`. The communication worker
 * (one `worker_threads` Worker per rank, started by `CommWorker.start` when `initProcessGroup`
 * gets `progress: 'worker'`) owns everything that moves: the rendezvous (rank 0's worker hosts
 * the store), the `tcp` or `ws` transport and its sockets, and real `ProcessGroup`s on it (the
 * world, and one per `newGroup` call), so the ring, the WASM/JS reductions, the fingerprints, the
 * op stamps and the deadlines are the ones every other path runs, only on the worker's event
 * loop. A rank's thread that runs a kernel that never yields no longer stalls its peers: the
 * worker keeps reading, reducing and forwarding segments.
 *
 * The handshake, in order:
 * 1. Start. The rank's thread allocates the control block (below) and starts the worker with
 *    `CommWorkerInit` (the rendezvous options, the world group's options and the block). The
 *    worker joins with `connectNetworkTransport` and posts `ready` with its rank, size and
 *    transport kind (or `init-failed` with the error's name and message, and exits).
 * 2. Issue. Each call posts one `OpMessage` at once, synchronously, in issue order
 *    (`postMessage` keeps order), with the op's id (per rank) and its group's number; the worker
 *    runs them on that group in that order, so the k-th calls of the ranks meet as they do on one
 *    thread. `newGroup` posts `NewGroupMessage` on every rank, member or not, so the worker's
 *    groups get the paths (and tags) the rank's have. Before posting, the rank writes 0 into the
 *    op's control word (`id % CONTROL_SLOTS`); at most `CONTROL_SLOTS` ops may be pending. An op
 *    with a device tensor waits for the tensor's read, and every op after it waits behind it
 *    (order first).
 * 3. Complete. The worker writes its clock (`performance.timeOrigin + performance.now()`, the
 *    same clock on both threads) into the op's `completedAt` slot, then stores `id + 1` into the
 *    control word and `Atomics.notify`s it. The rank's thread waits on the word with
 *    `Atomics.waitAsync`, so its `Work` settles on the next turn of its event loop, without a
 *    message. A failed op is posted instead (`FailedMessage`: the error's class, message, fields
 *    and abort reason, rebuilt into the same typed error on the rank's side) and its word becomes
 *    `-(id + 1)`.
 * 4. Abort and close. The rank's `CommWorker` stands for the worker's transport on the rank's
 *    thread: `abort` sets its abort state at once and posts `abort` with the reason, and the
 *    worker aborts its transport, which tells the peers as always. A transport abort from
 *    elsewhere reaches the rank as an `aborted` message (and through the failures of its pending
 *    ops), which sets that state, so the group's `state` and the errors of later calls are the
 *    ordinary group's. Closing a sub-group posts `closeGroup` after its ops; closing the world
 *    posts `close`: the worker drains and closes its world group (and the transport, and the
 *    store), and exits.
 *
 * How operands reach the worker. A typed array whose buffer is a `SharedArrayBuffer` (what
 * `WorkerGroup.allocate` hands out, or any shared view) is sent as its buffer, offset and length:
 * the worker runs the collective on the same memory, no copy. Any other array, and a CPU tensor's
 * storage, is copied once into a shared staging buffer at issue (inputs and in-out operands), and
 * the result copied once back when the op completes (outputs and in-out operands), on the rank's
 * thread; a device tensor is read and written back through an ordinary array around that.
 *
 * What a transport must implement to run here: nothing beyond the transport contract, as long as
 * the worker can build it from what can be posted (rendezvous options, shared buffers, no
 * functions): `connectNetworkTransport` builds `tcp` and `ws` unchanged, and `shm` is the world's
 * handle (its SharedArrayBuffers) posted to the worker, which attaches the rank's end of the rings
 * (`shmTransport`) as the rank's thread would: a thread rank of `webshard-run` with `progress:
 * 'worker'` hands its rings to its worker, and tells the launcher it joined once the worker has
 * and that it closed once the worker closed them ([Note: ranks as threads]). The world's arena
 * (fingerprints, the shared-memory plans) is the worker's then: the rank's thread never touches
 * the rings. A thread rank of a job of several nodes (two-level) stays on its thread.
 */

/** Ops pending at most at once per rank on the worker path. */
export const CONTROL_SLOTS = 1024;

/** Bytes of the control block: one Int32 word and one Float64 time per slot. */
export const CONTROL_BYTES = CONTROL_SLOTS * 4 + CONTROL_SLOTS * 8;

/** The control block's views: the completion words and the worker's completion times. */
export interface ControlViews {
  readonly words: Int32Array;
  readonly completedAt: Float64Array;
}

/** Views on a control block made by `createControlBlock`. */
export function controlViews(buffer: SharedArrayBuffer): ControlViews {
  return {
    words: new Int32Array(buffer, 0, CONTROL_SLOTS),
    completedAt: new Float64Array(buffer, CONTROL_SLOTS * 4, CONTROL_SLOTS),
  };
}

/** A fresh control block (every word 0). */
export function createControlBlock(): SharedArrayBuffer {
  return new SharedArrayBuffer(CONTROL_BYTES);
}

/** The clock both threads share: milliseconds since the epoch, sub-millisecond precise. */
export function sharedClock(): number {
  return performance.timeOrigin + performance.now();
}

/** How the worker joins: `connectNetworkTransport`'s options, less what cannot be posted. */
export type WorkerConnectOptions = Omit<NetworkTransportOptions, 'WebSocket'>;

/** How to start the worker's module (start-worker.ts's `defaultWorkerModule` gives the default). */
export interface CommWorkerModule {
  readonly file: string | URL;
  readonly eval?: boolean;
  readonly execArgv?: string[];
}

/**
 * The worker thread as the rank's side uses it: Node's `Worker`, declared without Node's types so
 * that the main entry's declarations stay those of a browser-safe package.
 */
export interface CommWorkerThread {
  postMessage(message: ToWorker): void;
  on(event: 'message', listener: (message: FromWorker) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'exit', listener: (code: number) => void): unknown;
  once(event: 'message', listener: (message: FromWorker) => void): unknown;
  once(event: 'error', listener: (error: Error) => void): unknown;
  once(event: 'exit', listener: (code: number) => void): unknown;
  off(event: 'message', listener: (message: FromWorker) => void): unknown;
  terminate(): Promise<number>;
}

/** How a worker joins a shared-memory world: the world's handle and this rank's place in it. */
export interface WorkerShmJoin {
  readonly handle: ShmHandle;
  readonly rank: number;
}

/**
 * What the worker starts with (`workerData`): how it joins, either a network transport's
 * rendezvous (`connect`) or a shared-memory world (`shm`), and the world group's options.
 */
export interface CommWorkerInit {
  readonly connect?: WorkerConnectOptions;
  readonly shm?: WorkerShmJoin;
  readonly group: ProcessGroupOptions;
  readonly control: SharedArrayBuffer;
}

/** An operand as the worker sees it: a view on shared memory. */
export interface SharedOperand {
  readonly buffer: SharedArrayBuffer;
  readonly byteOffset: number;
  readonly length: number;
  readonly dtype: CommDType;
}

/**
 * One call, posted by the rank's thread at the call: `id` numbers the ops of the whole rank (the
 * control slot), `group` the group it runs on (0 the world, then one number per `newGroup` call in
 * call order, member or not, on both threads).
 */
export type OpMessage = { id: number; group: number; timeoutMs?: number } & (
  | { type: 'allReduce'; data: SharedOperand; op: ReduceOp }
  | { type: 'allGather'; input: SharedOperand; output: SharedOperand }
  | { type: 'reduceScatter'; input: SharedOperand; output: SharedOperand; op: ReduceOp }
  | { type: 'broadcast'; data: SharedOperand; root: number }
  | { type: 'send' | 'recv'; data: SharedOperand; peer: number }
  | { type: 'barrier' }
);

/** A `newGroup` call of group `parent`, which numbers the new group `id` on the worker too. */
export interface NewGroupMessage {
  readonly type: 'newGroup';
  readonly parent: number;
  readonly id: number;
  readonly ranks: readonly number[];
  readonly options: ProcessGroupOptions;
}

/** Everything the rank's thread posts to its worker. */
export type ToWorker =
  | OpMessage
  | NewGroupMessage
  | { type: 'closeGroup'; group: number }
  | { type: 'abort'; reason: AbortReason }
  | { type: 'close' };

/** An error that crossed the thread boundary: enough to rebuild the typed error. */
export interface PostedError {
  readonly name: string;
  readonly message: string;
  readonly fields?: { op: string; rank: number; seq: number; peer?: number };
  readonly reason?: AbortReason;
}

/** A failed op's report. */
export interface FailedMessage {
  readonly type: 'failed';
  readonly id: number;
  readonly error: PostedError;
}

/** Everything the worker posts to the rank's thread. */
export type FromWorker =
  | { type: 'ready'; rank: number; size: number; kind: string }
  | { type: 'init-failed'; error: PostedError }
  | FailedMessage
  | { type: 'aborted'; reason: AbortReason };
