import { TransportAbortedError } from '../../errors.js';
import { SharedReducer } from '../../kernels/reduce.js';
import { RegisteredSegments, SEGMENT_SPAN } from '../../registered-segments.js';
import { type BarrierStamp, SHARED_ARENA_SETS, type SharedArena } from '../../shared-arena.js';
import { checkStamps, writeStamp } from './barrier-stamps.js';
import {
  ARENA_MAX_BYTES,
  arenaHeaderBytes,
  EXCHANGE_SLOT_BYTES,
  registeredSources,
  type ShmHandle,
  type shmOffsets,
  shmAbortPublished,
} from './shm-layout.js';
import type { ShmTransport } from './shm-transport.js';
import { inProgressTurn, yieldToEventLoop } from '../progress-turn.js';
import { waitAsync } from './shm-wait.js';

/**
 * Where a barrier is in its wait: letting the thread's queued work run first, polling, blocked in
 * `Atomics.wait`, asleep in `waitAsync`, or asleep in it because a progress turn found it waiting.
 */
type BarrierPhase = 'yield' | 'spin' | 'block' | 'sleep' | 'turn';

/**
 * [Note: barrier waits]
 * Waiting at a barrier has four phases. Yield: one turn of the event loop (`setImmediate`), so
 * that the work already queued on this thread runs before the barrier takes the thread. An op
 * issued and not yet awaited (DDP's overlapped bucket, FSDP's prefetched gather) reaches its
 * barriers in the microtasks between backward's kernels (the engine awaits every hook); without
 * the yield it spun and then blocked that thread for up to 2 ms a barrier while its peer was
 * still computing: 5.4-5.9 ms of every step at the ddp bench's 8 buckets (2 shm ranks, MLP 8x512,
 * measured), the overlapped step 0.74x of `delayAllreduce`'s. An op that is awaited pays the turn
 * once a barrier (tens of microseconds, within the spread of the latency runs). Spin: poll the arrivals for the handle's `spinMicros`
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
 * the barrier's epoch and ringing every other rank's gate; it then lets the thread's queued work
 * run, polls the arrivals, blocks on its own gate with `Atomics.wait` for at most 2 ms, and sleeps
 * with `Atomics.waitAsync`, so its event loop (deadline timers, the ring pump) runs again
 * ([Note: barrier waits]). An abort
 * rings every gate (and ends this rank's sleep directly), so a waiting barrier fails at once.
 */
export class ShmArena extends SharedReducer implements SharedArena {
  readonly slotBytes: number;
  /** Every SharedArrayBuffer object this thread has seen for the arena (one per growth). */
  private readonly seen = new WeakSet<ArrayBufferLike>();
  /** Registered buffers: the arena after its slots, then the handle's segments. */
  readonly registered: RegisteredSegments;
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
    this.registered = new RegisteredSegments(
      registeredSources(handle),
      transport.rank,
      handle.registeredBytes ?? ARENA_MAX_BYTES,
      this,
    );
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
    // Arena offsets (segment 0) for the two-level schedules' staging, which run on the arena alone.
    const address = this.registered.allocate(bytes);
    if (address >= SEGMENT_SPAN) {
      this.registered.release(address, bytes);
      throw new RangeError(
        `[allocate] rank ${this.transport.rank}: ${bytes} bytes do not fit the shared arena (2 GiB)`,
      );
    }
    return address;
  }

  release(offset: number, bytes: number): void {
    this.registered.release(offset, bytes);
  }

  nextRound(): number {
    const base = this.upcomingRound();
    this.round = (this.round + 1) % SHARED_ARENA_SETS;
    return base;
  }

  upcomingRound(): number {
    return arenaHeaderBytes(this.handle.size) + this.round * this.handle.size * this.slotBytes;
  }

  async exchange(
    words: Int32Array,
    waiting: (ranks: readonly number[]) => void,
    stamp?: BarrierStamp,
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
    await this.barrier(waiting, stamp);
    return all;
  }

  async barrier(waiting: (ranks: readonly number[]) => void, stamp?: BarrierStamp): Promise<void> {
    const { words, offsets, transport } = this;
    const { rank, size } = transport;
    this.epoch = (this.epoch + 1) | 0;
    const epoch = this.epoch;
    // [Note: barrier stamps]: what this rank arrives with, published with its arrival.
    const position = { epoch, round: this.round, exchange: this.exchanges };
    writeStamp(words, offsets, rank, position, stamp);
    Atomics.store(words, offsets.arrival(rank), epoch);
    for (let peer = 0; peer < size; peer++) {
      if (peer === rank) continue;
      Atomics.add(words, offsets.gate(peer), 1);
      Atomics.notify(words, offsets.gate(peer));
    }
    const gate = offsets.gate(rank);
    let spinUntil = 0;
    let blockUntil = 0;
    let phase: BarrierPhase = 'yield';
    let polls = 0;
    let from = 0;
    for (;;) {
      const seen = Atomics.load(words, gate);
      while (from < size && ((Atomics.load(words, offsets.arrival(from)) - epoch) | 0) >= 0) from++;
      // A barrier every rank reached has completed, even if the world aborts right after, unless
      // a peer arrived from another schedule.
      if (from === size) {
        const diverged = checkStamps(words, offsets, rank, size, epoch, stamp);
        if (diverged === null) return;
        transport.abort(diverged);
        throw new TransportAbortedError(transport.abortReason!);
      }
      if (shmAbortPublished(words) || transport.aborted) {
        throw new TransportAbortedError(transport.abortReason!);
      }
      if (phase === 'yield') {
        await yieldToEventLoop();
        phase = 'spin';
        spinUntil = performance.now() + this.handle.spinMicros / 1000;
        continue;
      }
      // In a progress turn the thread has compute to go back to ([Note: progress turns]); a
      // barrier that slept through one spins and blocks again when it wakes outside a turn.
      if (phase === 'spin' && inProgressTurn()) phase = 'turn';
      else if (phase === 'turn' && !inProgressTurn()) {
        phase = 'spin';
        spinUntil = performance.now() + this.handle.spinMicros / 1000;
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
