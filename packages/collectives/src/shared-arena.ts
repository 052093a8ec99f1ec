import type { ReduceKernels } from './kernels/reduce.js';
import type { RegisteredSegments } from './registered-segments.js';

/**
 * An optional capability of a transport whose ranks share memory (the `shm` transport): an arena
 * every rank maps, a barrier over all ranks, and the reduction kernels over the arena. The world
 * group uses it for its collectives instead of point-to-point messages (see
 * [Note: shared-memory collectives] in algorithms/shared.ts).
 *
 * The arena holds `SHARED_ARENA_SETS` (3) sets of `size` slots of `slotBytes` each; rank r's slot
 * of a set starts at `base + r * slotBytes`, so a set is also one contiguous run of
 * `size * slotBytes` bytes. Rounds cycle through the sets: whatever a rank wrote into a set stays
 * untouched until every rank has passed the barrier after the next round's first one.
 */
/** Sets of slots in a `SharedArena`: rounds cycle through them (see sharedAllReduce's pipeline). */
export const SHARED_ARENA_SETS = 3;

/**
 * What a barrier's caller says of the op it serves; every rank's is checked against the others'
 * ([Note: barrier stamps] in transports/shm/barrier-stamps.ts).
 */
export interface BarrierStamp {
  /** The collective (`allReduce`, `allGather`, ...). */
  readonly op: string;
  /** Its sequence number in its group. */
  readonly seq: number;
  /** The transport tag of its group. */
  readonly tag: number;
  /** The op's fingerprint exchange rather than its body. */
  readonly fingerprint?: boolean;
}

export interface SharedArena extends ReduceKernels {
  /** Bytes of one rank's slot in one set, a multiple of 64. */
  readonly slotBytes: number;
  /**
   * The shared memory of the arena as it is now (views must be taken from it, offsets are into
   * it). It grows as registered buffers are allocated; views taken earlier stay valid.
   */
  readonly buffer: SharedArrayBuffer;
  /**
   * Allocates `bytes` of this arena's own memory for this rank (64-byte aligned): the two-level
   * schedules' staging. Throws `RangeError` when the arena is full.
   */
  allocate(bytes: number): number;
  /** Returns an allocation of `allocate` for reuse. */
  release(offset: number, bytes: number): void;
  /**
   * Registered buffers ([Note: registered buffers]): the arena after its slots is segment 0, and
   * further segments grow as needed ([Note: growing registered memory]).
   */
  readonly registered: RegisteredSegments;
  /** Whether `buffer` is (a view of) this arena's memory, as this thread has seen it. */
  owns(buffer: ArrayBufferLike): boolean;
  /** Start the next round; returns the byte offset of its set (slot 0). */
  nextRound(): number;
  /**
   * The byte offset of the set the next round will take, without taking it: scratch for a phase
   * that only some ranks use (a registered reduce-scatter staging its output). Rounds must be
   * taken by every rank alike, whatever its operands: the ranks read each other's slots of the
   * set their own counters name.
   */
  upcomingRound(): number;
  /**
   * Arrive at the next barrier and wait until every rank has. Before each sleep `waiting` is told
   * the ranks that have not arrived (for a deadline's message). Rejects with
   * `TransportAbortedError` as soon as the transport aborts, and aborts the transport with a
   * `mismatch` when a peer arrived with another `stamp` or another round of the arena
   * ([Note: barrier stamps]).
   */
  barrier(waiting: (ranks: readonly number[]) => void, stamp?: BarrierStamp): Promise<void>;
  /**
   * All-gather a few words (at most 16) per rank through the arena, with one barrier: returns every
   * rank's words, rank r's at `r * 16`. The view stays valid until the exchange after next (the
   * collectives' fingerprints). `waiting` and rejection as for `barrier`.
   */
  exchange(
    words: Int32Array,
    waiting: (ranks: readonly number[]) => void,
    stamp?: BarrierStamp,
  ): Promise<Int32Array>;
}
