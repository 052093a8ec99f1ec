import { type AbortReason, TransportAbortedError } from '../../errors.js';
import { SharedReducer } from '../../kernels/reduce.js';
import { FreeLists } from '../../registered-memory.js';
import { SHARED_ARENA_SETS, type SharedArena } from '../../shared-arena.js';
import { AbortState, type Transport } from '../../transport.js';
import { type Incoming, Mailbox } from '../mailbox.js';
import {
  ARENA_MAX_BYTES,
  arenaAllocatorWord,
  arenaHeaderBytes,
  EXCHANGE_SLOT_BYTES,
  READ_OFFSET,
  readShmAbort,
  type ShmHandle,
  shmAbortPublished,
  shmOffsets,
  writeShmAbort,
} from './shm-layout.js';

interface OutgoingFrame {
  readonly tag: number;
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
const HEADER_BYTES = 8;

/** `Atomics.waitAsync` (Node 16+, ES2024; the repo's lib is ES2023). */
const waitAsync = (
  Atomics as unknown as {
    waitAsync(
      words: Int32Array,
      index: number,
      value: number,
    ): { async: false; value: string } | { async: true; value: Promise<string> };
  }
).waitAsync;

/** `setImmediate` where it exists (Node), else a zero-delay timer (browsers' Web Workers). */
const immediate: (run: () => void) => void =
  typeof globalThis.setImmediate === 'function'
    ? (run) => globalThis.setImmediate(run)
    : (run) => setTimeout(run, 0);

/** How often the timer that holds a thread open while work is pending checks it (see ShmTransport). */
const KEEP_ALIVE_CHECK_MS = 500;

function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => immediate(resolve));
}

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
    this.mailbox = new Mailbox(rank, (reason) => this.abort(reason));
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

  send(peer: number, tag: number, data: Uint8Array): Promise<void> {
    const failed = this.refuse(peer);
    if (failed !== null) return failed;
    return new Promise<void>((resolve, reject) => {
      const queue = this.outgoing[peer]!;
      queue.push({ tag, data, written: 0, resolve, reject });
      if (queue.length === 1) this.writeQueued(peer);
      this.holdWhilePending();
    });
  }

  recv(peer: number, tag: number, dst: Uint8Array, onArrive?: () => void): Promise<void> {
    const failed = this.refuse(peer);
    if (failed !== null) return failed;
    const received = this.mailbox.recv(peer, tag, dst, onArrive);
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
        this.headerView.setUint32(0, frame.tag, true);
        this.headerView.setUint32(4, frame.data.byteLength, true);
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
        const view = new DataView(state.header.buffer);
        state.tag = view.getUint32(0, true);
        const size = view.getUint32(4, true);
        state.message = this.mailbox.begin(peer, state.tag, size);
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

/** Where a barrier is in its wait: polling, blocked in `Atomics.wait`, asleep in `waitAsync`. */
type BarrierPhase = 'spin' | 'block' | 'sleep';

/**
 * [Note: barrier waits]
 * Waiting at a barrier has three phases. Spin: poll the arrivals for the handle's `spinMicros`
 * (30 us with a core per rank, 2 us when ranks outnumber cores), the fastest hand-off when the last
 * rank is running on another core. Block: `Atomics.wait` on this rank's gate for up to
 * BLOCK_MICROS, which gives the core up (to the very rank being waited for, when the ranks or
 * other processes share the cores) and wakes within tens of microseconds; it holds this thread's
 * event loop, hence the bound. Sleep: `Atomics.waitAsync`, which keeps the event loop running
 * (deadline timers, the ring pump) but costs about 100 us per wake-up. Where `Atomics.wait` is not
 * allowed (a browser's main thread) the block phase is skipped.
 *
 * Measured on 2 ranks on this 2-core machine, 1 MiB all-reduce. Spin then waitAsync: a 50 us spin
 * took 450-600 us (each late wake-up made the next barrier wait past its spin too, 1.5 sleeps per
 * op); a 500 us spin took 100 us while the cores were free, but 2.4 ms (and 2.2 ms for 4 bytes)
 * while other processes kept them busy, every barrier spinning out while the rank it waited for
 * had no core. Spin then block, interleaved in one run on the busy machine: no spin 270 us, 30 us
 * 290 us, 100 us 440 us; 16 MiB 4.3 / 5.0 / 5.1 ms.
 */
const BLOCK_MICROS = 2000;

let blockingAllowed: boolean | null = null;

/** Whether this thread may block in `Atomics.wait` (not on a browser's main thread). */
function canBlock(): boolean {
  if (blockingAllowed === null) {
    try {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 1, 0);
      blockingAllowed = true;
    } catch {
      blockingAllowed = false;
    }
  }
  return blockingAllowed;
}

/**
 * The shm transport's `SharedArena`: the handle's shared WebAssembly memory with the reduction
 * kernels instantiated over it, and a barrier on per-rank arrival epochs. A rank arrives by storing
 * the barrier's epoch and ringing every other rank's gate; it then polls the arrivals, blocks on
 * its own gate with `Atomics.wait` for at most 2 ms, and sleeps with `Atomics.waitAsync`, so its
 * event loop (deadline timers, the ring pump) runs again ([Note: barrier waits]). An abort
 * rings every gate (and ends this rank's sleep directly), so a waiting barrier fails at once.
 */
class ShmArena extends SharedReducer implements SharedArena {
  readonly slotBytes: number;
  /** Every SharedArrayBuffer object this thread has seen for the arena (one per growth). */
  private readonly seen = new WeakSet<ArrayBufferLike>();
  /** This rank's released registered allocations, by size in bytes. */
  private readonly free = new FreeLists();
  /** Ends the barrier's current sleep; the transport's abort calls it. */
  private wake: (() => void) | null = null;
  private round = 0;
  private exchanges = 0;
  private epoch = 0;

  constructor(
    private readonly transport: ShmTransport,
    private readonly handle: ShmHandle,
    private readonly words: Int32Array,
    private readonly offsets: ReturnType<typeof shmOffsets>,
  ) {
    super(handle.arena);
    this.slotBytes = handle.slotBytes;
    transport.onAbort(() => this.wake?.());
  }

  get buffer(): SharedArrayBuffer {
    const buffer = this.handle.arena.buffer as unknown as SharedArrayBuffer;
    this.seen.add(buffer);
    return buffer;
  }

  owns(buffer: ArrayBufferLike): boolean {
    if (this.seen.has(buffer)) return true;
    // Not seen yet: it may be the memory's current buffer, if the memory grew since the last look.
    return buffer === this.buffer;
  }

  allocate(bytes: number): number {
    const size = FreeLists.sizeOf(bytes);
    const reused = this.free.take(size);
    if (reused !== undefined) return reused;
    const memory = this.handle.arena;
    const words = new Int32Array(this.buffer);
    const unit = Atomics.add(words, arenaAllocatorWord(this.handle.size), size / 64);
    const offset = unit * 64;
    const end = offset + size;
    if (unit < 0 || end > ARENA_MAX_BYTES) {
      throw new RangeError(
        `[allocate] rank ${this.transport.rank}: ${size} bytes of registered memory do not fit the shared arena (2 GiB in all)`,
      );
    }
    // Any rank may grow the shared memory; growing past what another rank already grew is harmless.
    while (memory.buffer.byteLength < end) {
      try {
        memory.grow(Math.ceil((end - memory.buffer.byteLength) / 65536));
      } catch (error) {
        if (memory.buffer.byteLength >= end) break;
        throw new RangeError(
          `[allocate] rank ${this.transport.rank}: ${size} bytes of registered memory exceed the shared arena's reserve: ${(error as Error).message}`,
        );
      }
    }
    return offset;
  }

  release(offset: number, bytes: number): void {
    this.free.put(offset, FreeLists.sizeOf(bytes));
  }

  nextRound(): number {
    const set = this.round;
    this.round = (this.round + 1) % SHARED_ARENA_SETS;
    return arenaHeaderBytes(this.handle.size) + set * this.handle.size * this.slotBytes;
  }

  async exchange(
    words: Int32Array,
    waiting: (ranks: readonly number[]) => void,
  ): Promise<Int32Array> {
    const { size, rank } = this.transport;
    const stride = EXCHANGE_SLOT_BYTES / 4;
    if (words.length > stride) {
      throw new RangeError(`[exchange] at most ${stride} words per rank, got ${words.length}`);
    }
    const set = this.exchanges;
    this.exchanges ^= 1;
    const all = new Int32Array(this.buffer, set * size * EXCHANGE_SLOT_BYTES, size * stride);
    all.set(words, rank * stride);
    await this.barrier(waiting);
    return all;
  }

  async barrier(waiting: (ranks: readonly number[]) => void): Promise<void> {
    const { words, offsets, transport } = this;
    const { rank, size } = transport;
    this.epoch = (this.epoch + 1) | 0;
    const epoch = this.epoch;
    Atomics.store(words, offsets.arrival(rank), epoch);
    for (let peer = 0; peer < size; peer++) {
      if (peer === rank) continue;
      Atomics.add(words, offsets.gate(peer), 1);
      Atomics.notify(words, offsets.gate(peer));
    }
    const gate = offsets.gate(rank);
    const spinUntil = performance.now() + this.handle.spinMicros / 1000;
    let blockUntil = 0;
    let phase: BarrierPhase = 'spin';
    let polls = 0;
    let from = 0;
    for (;;) {
      const seen = Atomics.load(words, gate);
      while (from < size && ((Atomics.load(words, offsets.arrival(from)) - epoch) | 0) >= 0) from++;
      // A barrier every rank reached has completed, even if the world aborts right after.
      if (from === size) return;
      if (shmAbortPublished(words) || transport.aborted) {
        throw new TransportAbortedError(transport.abortReason!);
      }
      if (phase === 'spin') {
        if ((++polls & 63) !== 0 || performance.now() < spinUntil) continue;
        waiting(this.missing(from, epoch));
        phase = canBlock() ? 'block' : 'sleep';
        blockUntil = performance.now() + BLOCK_MICROS / 1000;
      }
      if (phase === 'block') {
        const left = blockUntil - performance.now();
        if (left > 0) {
          Atomics.wait(words, gate, seen, left);
          continue;
        }
        phase = 'sleep';
      }
      waiting(this.missing(from, epoch));
      // An abort rings the gate, but when this thread aborts itself (its deadline timer) nothing
      // else may keep its event loop alive until the wake-up arrives: Node does not count a
      // pending waitAsync, and a worker would exit. So the abort also wakes the barrier directly.
      const wait = waitAsync(words, gate, seen);
      if (!wait.async) continue;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        void wait.value.then(() => resolve());
      });
      this.wake = null;
    }
  }

  /** The ranks from `from` on that have not arrived at barrier `epoch`. */
  private missing(from: number, epoch: number): number[] {
    const { words, offsets } = this;
    const missing: number[] = [];
    for (let peer = from; peer < this.transport.size; peer++) {
      if (((Atomics.load(words, offsets.arrival(peer)) - epoch) | 0) < 0) missing.push(peer);
    }
    return missing;
  }
}
