import { type AbortReason, TransportAbortedError } from '../../errors.js';
import { NO_STAMP, type OpStamp } from '../../op-stamp.js';
import type { SharedArena } from '../../shared-arena.js';
import { AbortState, type Transport } from '../../transport-contract.js';
import { type Incoming, Mailbox } from '../mailbox.js';
import { resolveUnexpectedBudget } from '../unexpected-budget.js';
import { ShmArena } from './shm-arena.js';
import {
  READ_OFFSET,
  readShmAbort,
  type ShmHandle,
  shmOffsets,
  writeShmAbort,
} from './shm-layout.js';
import { RING_HEADER_BYTES, readRingHeader, writeRingHeader } from './ring-header.js';
import { yieldToEventLoop } from '../progress-turn.js';
import { waitAsync } from './shm-wait.js';

interface OutgoingFrame {
  readonly tag: number;
  readonly stamp: OpStamp;
  readonly data: Uint8Array;
  /** Bytes of header + payload written so far. */
  written: number;
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
}

interface IncomingState {
  readonly header: Uint8Array;
  headerFill: number;
  tag: number;
  /** Where the payload goes: a posted receive's buffer, or a pooled buffer to stash. */
  target: Uint8Array | null;
  message: Incoming | null;
  fill: number;
}

/** Polls of the doorbell before sleeping on it: a wake-up costs tens of microseconds. */
const SPIN_POLLS = 2000;
const HEADER_BYTES = RING_HEADER_BYTES;

/** How often the timer that holds a thread open while work is pending checks it (see ShmTransport). */
const KEEP_ALIVE_CHECK_MS = 500;

/**
 * One rank of a shared-memory world (ranks as worker threads of one process). See
 * [Note: shared-memory layout] in shm-layout.ts. A pump drains every incoming ring as data arrives
 * (straight into a posted receive's buffer, else into a stash) and writes queued frames as ring
 * space frees, so two ranks that send to each other before receiving never block each other
 * (rule 4 of the transport contract). It sleeps with `Atomics.waitAsync` on this rank's doorbell,
 * keeping the thread's event loop free for the application. A pending `waitAsync` does not keep a
 * Node thread alive, so while a receive or a send is pending a timer does (`holdWhilePending`):
 * else a thread whose only work is a receive on the transport (no process group, whose deadline
 * timer would hold it) ended with exit code 0 in the middle of it.
 */
export class ShmTransport implements Transport {
  readonly kind = 'shm';
  readonly size: number;
  private readonly words: Int32Array;
  private readonly bytes: Uint8Array;
  private readonly offsets: ReturnType<typeof shmOffsets>;
  private readonly capacity: number;
  private readonly mailbox: Mailbox;
  private readonly abortState = new AbortState();
  private readonly outgoing: OutgoingFrame[][] = [];
  private readonly incoming: IncomingState[] = [];
  private keepAlive: ReturnType<typeof setInterval> | null = null;
  private readonly headerScratch = new Uint8Array(HEADER_BYTES);
  private readonly headerView = new DataView(this.headerScratch.buffer);
  private state: 'open' | 'closed' = 'open';
  private pumping = false;
  readonly sharedArena: SharedArena;

  constructor(
    private readonly handle: ShmHandle,
    readonly rank: number,
  ) {
    this.size = handle.size;
    this.capacity = handle.capacity;
    this.words = new Int32Array(handle.buffer);
    this.bytes = new Uint8Array(handle.buffer);
    this.offsets = shmOffsets(handle.size, handle.capacity);
    // The budget of [Note: the unexpected-message budget], from WEBSHARD_MAX_UNEXPECTED_BYTES.
    const budget = resolveUnexpectedBudget(undefined);
    this.mailbox = new Mailbox(rank, (reason) => this.abort(reason), budget);
    for (let peer = 0; peer < this.size; peer++) {
      this.outgoing.push([]);
      this.incoming.push({
        header: new Uint8Array(HEADER_BYTES),
        headerFill: 0,
        tag: 0,
        target: null,
        message: null,
        fill: 0,
      });
    }
    this.abortState.on((reason) => {
      this.failReceives(reason);
      const error = new TransportAbortedError(reason);
      for (const queue of this.outgoing) for (const frame of queue.splice(0)) frame.reject(error);
      this.release();
    });
    this.sharedArena = new ShmArena(this, handle, this.words, this.offsets);
    // A bug in the pump must fail the world with its message, not end the thread with an
    // unhandled rejection that the other ranks only see as a lost peer.
    this.pump().catch((error: unknown) => {
      const e = error instanceof Error ? error : new Error(String(error));
      this.abort({
        kind: 'error',
        origin: rank,
        message: `[shm] rank ${rank}: the ring pump failed: ${e.name}: ${e.message} (${e.stack?.split('\n')[1]?.trim() ?? 'no stack'})`,
      });
    });
  }

  /** Whether this rank has adopted an abort (cheap; `abortReason` also polls shared memory). */
  get aborted(): boolean {
    return this.abortState.reason !== null;
  }

  get abortReason(): AbortReason | null {
    this.pollAbort();
    return this.abortState.reason;
  }

  onAbort(listener: (reason: AbortReason) => void): () => void {
    return this.abortState.on(listener);
  }

  abort(reason: AbortReason): void {
    if (this.abortState.reason !== null) return;
    this.abortState.trigger(writeShmAbort(this.handle, reason));
  }

  send(peer: number, tag: number, data: Uint8Array, stamp = NO_STAMP): Promise<void> {
    const failed = this.refuse(peer);
    if (failed !== null) return failed;
    return new Promise<void>((resolve, reject) => {
      const queue = this.outgoing[peer]!;
      queue.push({ tag, stamp, data, written: 0, resolve, reject });
      if (queue.length === 1) this.writeQueued(peer);
      this.holdWhilePending();
    });
  }

  /** Rule 11 of [Note: the transport contract]: the op's early messages are held outside the budget. */
  expect(peer: number, tag: number, stamp: OpStamp, bytes: number, messages: number): () => void {
    return this.mailbox.expect(peer, tag, stamp, bytes, messages);
  }

  recv(
    peer: number,
    tag: number,
    dst: Uint8Array,
    onArrive?: () => void,
    stamp?: OpStamp,
  ): Promise<void> {
    const failed = this.refuse(peer);
    if (failed !== null) return failed;
    const received = this.mailbox.recv(peer, tag, dst, onArrive, stamp);
    this.holdWhilePending();
    return received;
  }

  async close(): Promise<void> {
    if (this.state === 'closed') return;
    this.state = 'closed';
    this.release();
    const bell = this.offsets.bell(this.rank);
    Atomics.add(this.words, bell, 1);
    Atomics.notify(this.words, bell);
    this.failReceives({ kind: 'user', origin: this.rank, message: 'transport closed' });
  }

  /**
   * Rejects every pending receive (the mailbox's abort covers the ones a peer's frame was being
   * read into: a peer that dies mid-frame never completes it) and forgets the frames half read.
   */
  private failReceives(reason: AbortReason): void {
    this.mailbox.abort(reason);
    for (const state of this.incoming) {
      state.message = null;
      state.target = null;
      state.headerFill = 0;
    }
  }

  private refuse(peer: number): Promise<void> | null {
    const reason = this.abortReason;
    if (reason !== null) return Promise.reject(new TransportAbortedError(reason));
    if (!Number.isInteger(peer) || peer < 0 || peer >= this.size || peer === this.rank) {
      return Promise.reject(
        new TransportAbortedError({
          kind: 'error',
          origin: this.rank,
          message: `rank ${this.rank} cannot exchange with rank ${peer} of ${this.size}`,
        }),
      );
    }
    return null;
  }

  private pollAbort(): void {
    if (this.abortState.reason !== null) return;
    const reason = readShmAbort(this.handle);
    if (reason !== null) this.abortState.trigger(reason);
  }

  private ring(bell: number): void {
    Atomics.add(this.words, bell, 1);
    Atomics.notify(this.words, bell);
  }

  /** Write as much of `peer`'s queue as its ring has room for; returns whether anything moved. */
  private writeQueued(peer: number): boolean {
    const queue = this.outgoing[peer]!;
    if (queue.length === 0) return false;
    const control = this.offsets.control(this.rank, peer);
    const ringStart = this.offsets.ring(this.rank, peer);
    const capacity = this.capacity;
    let writePos = Atomics.load(this.words, control) >>> 0;
    const readPos = Atomics.load(this.words, control + READ_OFFSET) >>> 0;
    let free = capacity - ((writePos - readPos) >>> 0);
    let moved = false;
    const put = (source: Uint8Array, from: number, length: number) => {
      let done = 0;
      while (done < length) {
        const at = writePos % capacity;
        const piece = Math.min(length - done, capacity - at);
        this.bytes.set(source.subarray(from + done, from + done + piece), ringStart + at);
        done += piece;
        writePos = (writePos + piece) >>> 0;
      }
    };
    while (queue.length > 0 && free > 0) {
      const frame = queue[0]!;
      if (frame.written < HEADER_BYTES) {
        const { tag, data, stamp } = frame;
        writeRingHeader(this.headerView, tag, data.byteLength, this.rank, stamp);
        const length = Math.min(HEADER_BYTES - frame.written, free);
        put(this.headerScratch, frame.written, length);
        frame.written += length;
        free -= length;
        moved = true;
      }
      const payloadDone = Math.max(0, frame.written - HEADER_BYTES);
      const length = Math.min(frame.data.byteLength - payloadDone, free);
      if (length > 0 && frame.written >= HEADER_BYTES) {
        put(frame.data, payloadDone, length);
        frame.written += length;
        free -= length;
        moved = true;
      }
      if (frame.written === HEADER_BYTES + frame.data.byteLength) {
        queue.shift();
        frame.resolve();
      } else {
        break;
      }
    }
    if (moved) {
      Atomics.store(this.words, control, writePos | 0);
      this.ring(this.offsets.bell(peer));
    }
    return moved;
  }

  /** Consume what `peer` has written; returns whether anything moved. */
  private readIncoming(peer: number): boolean {
    const control = this.offsets.control(peer, this.rank);
    const ringStart = this.offsets.ring(peer, this.rank);
    const capacity = this.capacity;
    const writePos = Atomics.load(this.words, control) >>> 0;
    let readPos = Atomics.load(this.words, control + READ_OFFSET) >>> 0;
    let available = (writePos - readPos) >>> 0;
    if (available === 0) return false;
    while (available > 0) {
      const at = readPos % capacity;
      const piece = Math.min(available, capacity - at);
      const used = this.consume(peer, this.bytes.subarray(ringStart + at, ringStart + at + piece));
      readPos = (readPos + used) >>> 0;
      available -= used;
      if (used < piece) break;
    }
    Atomics.store(this.words, control + READ_OFFSET, readPos | 0);
    this.ring(this.offsets.bell(peer));
    return true;
  }

  /** Feed ring bytes to `peer`'s frame parser; returns how many it took. */
  private consume(peer: number, chunk: Uint8Array): number {
    const state = this.incoming[peer]!;
    let used = 0;
    while (used < chunk.length) {
      if (state.headerFill < HEADER_BYTES) {
        const length = Math.min(HEADER_BYTES - state.headerFill, chunk.length - used);
        state.header.set(chunk.subarray(used, used + length), state.headerFill);
        state.headerFill += length;
        used += length;
        if (state.headerFill < HEADER_BYTES) break;
        const header = readRingHeader(new DataView(state.header.buffer));
        const { length: size, stamp, sender } = header;
        state.tag = header.tag;
        state.message = this.mailbox.begin(peer, state.tag, size, stamp, sender);
        if (state.message === null) return chunk.length;
        state.target = state.message.target;
        state.fill = 0;
        if (size === 0) {
          this.complete(state);
          continue;
        }
      }
      const target = state.target!;
      const length = Math.min(target.byteLength - state.fill, chunk.length - used);
      target.set(chunk.subarray(used, used + length), state.fill);
      state.fill += length;
      used += length;
      if (state.fill === target.byteLength) this.complete(state);
    }
    return used;
  }

  private complete(state: IncomingState): void {
    this.mailbox.complete(state.message!);
    state.headerFill = 0;
    state.target = null;
    state.message = null;
  }

  /**
   * Holds the thread open until no receive or send is pending (checked every
   * KEEP_ALIVE_CHECK_MS), the transport is closed or it aborted.
   */
  private release(): void {
    if (this.keepAlive === null) return;
    clearInterval(this.keepAlive);
    this.keepAlive = null;
  }

  private holdWhilePending(): void {
    if (this.keepAlive !== null) return;
    this.keepAlive = setInterval(() => {
      if (this.state === 'open' && this.abortReason === null && this.hasPendingWork()) return;
      this.release();
    }, KEEP_ALIVE_CHECK_MS);
  }

  /** Whether a receive is posted or being filled, or a frame waits to be written. */
  private hasPendingWork(): boolean {
    return (
      this.mailbox.hasWaiting() ||
      this.incoming.some((state) => state.target !== null) ||
      this.outgoing.some((queue) => queue.length > 0)
    );
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    const bell = this.offsets.bell(this.rank);
    while (this.state === 'open') {
      const seen = Atomics.load(this.words, bell);
      this.pollAbort();
      if (this.abortState.reason !== null) break;
      let moved = false;
      for (let peer = 0; peer < this.size; peer++) {
        if (peer === this.rank) continue;
        if (this.readIncoming(peer)) moved = true;
        if (this.writeQueued(peer)) moved = true;
      }
      if (moved) {
        // Let the continuations of the receives just completed run (and post the next ones).
        await yieldToEventLoop();
        continue;
      }
      let polls = 0;
      while (polls < SPIN_POLLS && Atomics.load(this.words, bell) === seen) polls++;
      if (Atomics.load(this.words, bell) !== seen) continue;
      const wait = waitAsync(this.words, bell, seen);
      if (wait.async) await wait.value;
      else await Promise.resolve();
    }
    this.pumping = false;
  }
}
