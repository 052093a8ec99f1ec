import { ArgumentError } from '@webshard/tensor-core';
import { loadWorkerStarter } from '#platform';
import { type AbortReason, GroupAbortedError } from '../errors.js';
import type { ProcessGroupOptions } from '../process-group.js';
import { AbortState, type Transport } from '../transport-contract.js';
import { waitAsync } from '../transports/shm/shm-wait.js';
import {
  type CommWorkerInit,
  type CommWorkerModule,
  type CommWorkerThread,
  CONTROL_SLOTS,
  type ControlViews,
  controlViews,
  createControlBlock,
  type FromWorker,
  type OpMessage,
  type ToWorker,
  type WorkerConnectOptions,
  type WorkerShmJoin,
} from './handshake.js';
import { rebuildError } from './posted-error.js';

/** Options of `CommWorker.start`. */
export interface CommWorkerOptions {
  /** How the worker joins: `connectNetworkTransport`'s options (rank 0's worker hosts the store). */
  connect?: WorkerConnectOptions;
  /** Or: the shared-memory world it attaches this rank's rings of (exactly one of the two). */
  shm?: WorkerShmJoin;
  /** Called once the worker closed the transport and exited (`close`). */
  onClosed?: () => void;
  /** Options of the worker's world group. */
  group?: ProcessGroupOptions;
  /** The worker's module; default `defaultWorkerModule()` (start-worker.ts). */
  worker?: CommWorkerModule;
}

/** An op handed to the worker: settles when the worker signals it, with its completion time. */
export interface IssuedOp {
  readonly promise: Promise<void>;
  /** When the worker saw the op complete (or fail), on `sharedClock`'s clock; 0 until then. */
  readonly completedAt: () => number;
}

interface Pending {
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/**
 * The rank's side of its communication worker ([Note: the communication worker handshake] in
 * handshake.ts): it starts the worker, posts each op at the call and settles it from the op's
 * control word. To the groups of the rank's thread (`WorkerGroup`) it stands for the transport
 * the worker hosts: its `kind`, rank and size, its abort state (mirrored from the worker, and
 * `abort` forwarded to it) and `close`. It moves no bytes itself: `send` and `recv` refuse.
 */
export class CommWorker implements Transport {
  readonly rank: number;
  readonly size: number;
  readonly kind: string;
  /** Marks a transport whose bytes move on another thread: `send` and `recv` refuse here. */
  readonly movesBytesOnWorker = true;
  private readonly control: ControlViews;
  private readonly pending = new Map<number, Pending>();
  private readonly aborts = new AbortState();
  private nextId = 0;
  private groups = 1;
  /** Settles once every op waiting for a device read has been posted; null when none waits. */
  private gate: Promise<void> | null = null;
  private closing: Promise<void> | null = null;
  private onExit: () => void = () => {};
  private exited = false;

  private constructor(
    private readonly worker: CommWorkerThread,
    init: CommWorkerInit,
    ready: { rank: number; size: number; kind: string },
    private readonly onClosed: (() => void) | undefined,
  ) {
    this.rank = ready.rank;
    this.size = ready.size;
    this.kind = ready.kind;
    this.control = controlViews(init.control);
  }

  /** Starts the worker and waits until it has joined the other ranks. */
  static async start(options: CommWorkerOptions): Promise<CommWorker> {
    if ((options.connect === undefined) === (options.shm === undefined)) {
      throw new ArgumentError('commWorker', 'give the worker connect or shm, one of the two');
    }
    const timeoutMs = options.connect?.timeoutMs;
    const init: CommWorkerInit = {
      ...(options.connect === undefined ? {} : { connect: options.connect }),
      ...(options.shm === undefined ? {} : { shm: options.shm }),
      group: { ...(timeoutMs === undefined ? {} : { timeoutMs }), ...options.group },
      control: createControlBlock(),
    };
    const startWorker = await loadWorkerStarter();
    const worker = startWorker(init, options.worker);
    const ready = await new Promise<{ rank: number; size: number; kind: string }>(
      (resolve, reject) => {
        const onMessage = (message: FromWorker) => {
          if (message.type === 'ready') {
            worker.off('message', onMessage);
            resolve(message);
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
      },
    );
    const comm = new CommWorker(worker, init, ready, options.onClosed);
    worker.on('message', (message: FromWorker) => comm.received(message));
    worker.on('error', (error) => comm.lost(`the communication worker threw: ${error.message}`));
    worker.on('exit', (code) => {
      comm.exited = true;
      comm.onExit();
      if (comm.closing === null) comm.lost(`the communication worker exited (${code})`);
    });
    return comm;
  }

  get abortReason(): AbortReason | null {
    return this.aborts.reason;
  }

  onAbort(listener: (reason: AbortReason) => void): () => void {
    return this.aborts.on(listener);
  }

  /** Aborts here at once, and the worker's transport, which tells the peers. */
  abort(reason: AbortReason): void {
    if (this.aborts.trigger(reason)) this.postNow({ type: 'abort', reason });
  }

  send(): Promise<void> {
    return Promise.reject(this.notHere('send'));
  }

  recv(): Promise<void> {
    return Promise.reject(this.notHere('recv'));
  }

  /** The number the next `newGroup` call gets (both threads count the calls alike). */
  nextGroup(): number {
    return this.groups++;
  }

  /** Whether the worker is gone (closed, or lost). */
  get gone(): boolean {
    return this.exited;
  }

  /**
   * Numbers an op, posts it now (step 2 of the handshake) and settles it from its control word
   * (step 3). `build` makes the message for the op's id. With `ready` (a device tensor's read),
   * the op is posted once it settles, and every op issued after it after that: the worker gets
   * the ops in issue order. A `ready` that fails fails the op and aborts the group, as a failed
   * read in an op does on the rank's thread (the other ranks would wait for this op).
   */
  issue(op: string, build: (id: number) => OpMessage, ready: Promise<void> | null): IssuedOp {
    this.checkCapacity(op);
    const id = this.nextId++;
    const slot = id % CONTROL_SLOTS;
    const { words, completedAt } = this.control;
    Atomics.store(words, slot, 0);
    completedAt[slot] = 0;
    const message = build(id);
    const promise = new Promise<void>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
    });
    this.postInOrder(op, id, message, ready);
    const waited = waitAsync(words, slot, 0);
    const settle = () => {
      if (Atomics.load(words, slot) !== id + 1) return;
      const pending = this.pending.get(id);
      if (pending === undefined) return;
      this.pending.delete(id);
      pending.resolve();
    };
    if (waited.async) void waited.value.then(settle);
    else settle();
    return { promise, completedAt: () => completedAt[slot]! };
  }

  /** Throws unless one more op may be pending (`CONTROL_SLOTS` at most). */
  checkCapacity(op: string): void {
    if (this.pending.size >= CONTROL_SLOTS)
      throw new ArgumentError(op, `rank ${this.rank}: more than ${CONTROL_SLOTS} ops pending`);
  }

  /** Posts a message that needs no answer (`newGroup`, `closeGroup`), after the ops before it. */
  post(message: ToWorker): void {
    if (this.gate !== null) {
      this.gate = this.gate.then(() => this.postNow(message));
      return;
    }
    this.postNow(message);
  }

  private postNow(message: ToWorker): void {
    if (!this.exited) this.worker.postMessage(message);
  }

  /** Posts op `id` now, or after `ready` and the ops still waiting before it. */
  private postInOrder(
    op: string,
    id: number,
    message: ToWorker,
    ready: Promise<void> | null,
  ): void {
    if (ready === null && this.gate === null) {
      this.postNow(message);
      return;
    }
    const gate = (this.gate ?? Promise.resolve())
      .then(() => ready)
      .then(
        () => this.postNow(message),
        (error: unknown) => {
          const why = `${op} #${id} could not read its operand on rank ${this.rank}: ${error instanceof Error ? error.message : String(error)}`;
          const reason: AbortReason = { kind: 'error', origin: this.rank, op, message: why };
          this.abort(reason);
          const pending = this.pending.get(id);
          this.pending.delete(id);
          pending?.reject(new GroupAbortedError({ op, rank: this.rank, seq: id }, why, { reason }));
        },
      );
    this.gate = gate;
    void gate.then(() => {
      if (this.gate === gate) this.gate = null;
    });
  }

  /**
   * Closes after the ops issued (the worker's world group drains them first), closes the
   * worker's groups, transport and store, and ends the worker.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      if (this.exited) return;
      const exited = new Promise<void>((resolve) => {
        this.onExit = resolve;
      });
      this.post({ type: 'close' });
      await exited;
      this.onClosed?.();
    })();
    return this.closing;
  }

  private notHere(op: string): Error {
    return new ArgumentError(
      op,
      `rank ${this.rank}: this transport's bytes move on the communication worker; use the group's calls`,
    );
  }

  private received(message: FromWorker): void {
    if (message.type === 'aborted') {
      this.aborts.trigger(message.reason);
      return;
    }
    if (message.type === 'failed') {
      const pending = this.pending.get(message.id);
      if (pending === undefined) return;
      this.pending.delete(message.id);
      if (message.error.reason !== undefined) this.aborts.trigger(message.error.reason);
      pending.reject(rebuildError(message.error));
    }
  }

  /** The worker is gone: every pending op fails, as a transport abort would fail it. */
  private lost(why: string): void {
    const reason: AbortReason = { kind: 'error', origin: this.rank, message: why };
    this.aborts.trigger(reason);
    for (const [id, pending] of this.pending) {
      this.pending.delete(id);
      pending.reject(
        new GroupAbortedError({ op: 'commWorker', rank: this.rank, seq: id }, why, { reason }),
      );
    }
  }
}
