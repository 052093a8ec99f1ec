import type { AbortReason } from '../../errors.js';
import { createProgressBuffer } from '../../progress/shared-progress-board.js';
import type { SegmentSource } from '../../registered-segments.js';
import { SHARED_ARENA_SETS } from '../../shared-arena.js';

/**
 * What every rank (and the parent thread) needs to attach to one shared-memory world. Structured-
 * cloneable: pass it to workers in `workerData`; the SharedArrayBuffer is shared, not copied.
 */
export interface ShmHandle {
  readonly buffer: SharedArrayBuffer;
  readonly size: number;
  /** Bytes of each one-directional channel's ring. */
  readonly capacity: number;
  /**
   * The collectives' arena: a header of two sets of per-rank 64-byte exchange slots and the
   * registered-buffer allocator's line, then three sets of `size` slots of `slotBytes` (see
   * `SharedArena`), then registered buffers, which grow the memory as they are allocated.
   */
  readonly arena: WebAssembly.Memory;
  /**
   * Registered memory past the arena's 2 GiB, one shared memory of up to 2 GiB each, empty until
   * allocated from ([Note: growing registered memory] in registered-segments.ts); absent on
   * handles made before they existed.
   */
  readonly segments?: readonly WebAssembly.Memory[];
  /** Bytes the arena (after its slots) and `segments` may hold together. */
  readonly registeredBytes?: number;
  readonly slotBytes: number;
  /**
   * Microseconds a barrier polls before blocking (see [Note: barrier waits] in shm-arena.ts):
   * when ranks outnumber cores a spinning rank takes the core the rank it waits for needs, so then
   * it barely spins.
   */
  readonly spinMicros: number;
  /**
   * The ranks' progress board, which a deadline polls ([Note: blaming a stalled rank]); handles
   * made before it existed have none, and their deadlines blame as before.
   */
  readonly progress?: SharedArrayBuffer;
}

/** Options of `createShmHandle`. */
export interface ShmHandleOptions {
  /** Bytes per channel ring; defaults to 64 MiB spread over the channels, 64 KiB to 4 MiB each. */
  capacity?: number;
  /** Bytes of each rank's arena slot (rounded to 64, at least 64 per rank). Default 1 MiB. */
  slotBytes?: number;
  /**
   * Bytes the ranks together may hold in registered buffers (`ProcessGroup.allocate`), reserved as
   * address space (in segments of 2 GiB) and committed as they are allocated. Default 32 GiB
   * ([Note: growing registered memory] in registered-segments.ts).
   */
  registeredBytes?: number;
  /** Cores the ranks share; fewer cores than ranks means barriers barely spin. Default: plenty. */
  cores?: number;
  /**
   * Microseconds a barrier polls before blocking, overriding the choice made from `cores` (30
   * with a core per rank, 2 when they share; see [Note: barrier waits] in shm-arena.ts).
   */
  spinMicros?: number;
}

/**
 * [Note: shared-memory layout]
 * One SharedArrayBuffer holds, as Int32 words: the abort word (0 none, 1 being written, 2 ready)
 * and the reason's length; one doorbell per rank (each on its own 64-byte line), a counter that
 * anyone who gives that rank work (data to read, ring space to write into, an abort) increments and
 * `Atomics.notify`s, so a rank sleeps on a single word whatever it waits for; the abort reason as
 * JSON; and one single-producer single-consumer byte ring per ordered pair of ranks, with its write
 * and read positions (byte counts modulo 2^32) on separate lines. Frames in a ring are an 8-byte
 * header (tag, byte length) and the payload; a frame may wrap around the ring's end and may be
 * written and read in pieces, so messages of any size stream through a ring of fixed capacity.
 * The collectives' barrier adds, per rank, the last barrier epoch it arrived at, two stamps of what
 * it arrived with ([Note: barrier stamps]) and a gate (a doorbell of its own, so a barrier does not
 * wake the ring pump); aborts ring every gate too. The
 * collectives' data lives in a separate shared `WebAssembly.Memory` (the arena), so that the
 * reduction kernels read and write it in place.
 */
const LINE_WORDS = 16;
const ABORT_STATE = 0;
const ABORT_LENGTH = 1;
const ABORT_TEXT_BYTES = 8192;

export interface ShmOffsets {
  /** Int32 index of rank r's doorbell. */
  bell(rank: number): number;
  /** Int32 index of rank r's barrier gate (its doorbell for barriers). */
  gate(rank: number): number;
  /** Int32 index of the last barrier epoch rank r arrived at. */
  arrival(rank: number): number;
  /**
   * Int32 index of rank r's stamp of its arrival at barriers of `parity` (epoch & 1): see
   * [Note: barrier stamps] in barrier-stamps.ts.
   */
  stamp(rank: number, parity: number): number;
  /** Int32 index of the write position of the channel src -> dst (the read position is + LINE_WORDS). */
  control(src: number, dst: number): number;
  /** Byte offset of the ring of the channel src -> dst. */
  ring(src: number, dst: number): number;
  readonly abortText: number;
}

export function shmOffsets(size: number, capacity: number): ShmOffsets & { total: number } {
  const bells = LINE_WORDS;
  const gates = bells + size * LINE_WORDS;
  const arrivals = gates + size * LINE_WORDS;
  const stamps = arrivals + size * LINE_WORDS;
  const controls = stamps + size * 2 * LINE_WORDS;
  const channel = (src: number, dst: number) => src * size + dst;
  const abortText = (controls + size * size * 2 * LINE_WORDS) * 4;
  const rings = abortText + ABORT_TEXT_BYTES;
  return {
    bell: (rank) => bells + rank * LINE_WORDS,
    gate: (rank) => gates + rank * LINE_WORDS,
    arrival: (rank) => arrivals + rank * LINE_WORDS,
    stamp: (rank, parity) => stamps + (rank * 2 + parity) * LINE_WORDS,
    control: (src, dst) => controls + channel(src, dst) * 2 * LINE_WORDS,
    ring: (src, dst) => rings + channel(src, dst) * capacity,
    abortText,
    total: rings + size * size * capacity,
  };
}

export const READ_OFFSET = LINE_WORDS;

/** Bytes of a rank's slot for `SharedArena.exchange`. */
export const EXCHANGE_SLOT_BYTES = 64;

/** Bytes before the arena's data slots: two sets of exchange slots, then the allocator's line. */
export function arenaHeaderBytes(size: number): number {
  return 2 * size * EXCHANGE_SLOT_BYTES + 64;
}

/** Int32 index, in the arena, of the registered-buffer allocator's next free 64-byte unit. */
export function arenaAllocatorWord(size: number): number {
  return (2 * size * EXCHANGE_SLOT_BYTES) / 4;
}

/** Byte offset where registered buffers start: after the three sets of data slots. */
export function arenaRegisteredStart(size: number, slotBytes: number): number {
  return arenaHeaderBytes(size) + SHARED_ARENA_SETS * size * slotBytes;
}

/**
 * The most the arena grows to: 2 GiB (32768 pages), so every byte offset stays a non-negative i32
 * in the WASM kernels (a shared memory could address 4 GiB).
 */
export const ARENA_MAX_BYTES = 2 ** 31;
const MAX_PAGES = ARENA_MAX_BYTES / 65536;
/**
 * The maximum pages of each segment past the arena that holds `pages` more pages of registered
 * memory (each segment's first page also holds its allocator's word).
 */
export function segmentPages(pages: number): number[] {
  const limits: number[] = [];
  for (let left = pages; left > 0; left -= MAX_PAGES - 1)
    limits.push(Math.min(MAX_PAGES, left + 1));
  return limits;
}

/**
 * Where a handle's registered memory lives: the arena after its slots (its allocator's word in the
 * header), then each of `segments` (its word at the start).
 */
export function registeredSources(handle: ShmHandle): SegmentSource[] {
  const start = arenaRegisteredStart(handle.size, handle.slotBytes);
  const pages = Math.max(1, Math.ceil(start / 65536));
  const registered = Math.ceil((handle.registeredBytes ?? ARENA_MAX_BYTES) / 65536);
  const arenaLimit = Math.min(MAX_PAGES, pages + registered) * 65536;
  const limits = segmentPages(registered - (arenaLimit / 65536 - pages));
  return [
    { memory: handle.arena, word: arenaAllocatorWord(handle.size), limit: arenaLimit },
    ...(handle.segments ?? []).map((memory, i) => ({ memory, word: 0, limit: limits[i]! * 65536 })),
  ];
}

/** The default of `ShmHandleOptions.registeredBytes`. */
const DEFAULT_REGISTERED_BYTES = 32 * 2 ** 30;

/**
 * Barrier spin before blocking when every rank has a core, and when they share cores (see
 * [Note: barrier waits] in shm-arena.ts).
 */
const SPIN_MICROS_DEDICATED = 30;
const SPIN_MICROS_SHARED = 2;

/** A fresh world of `size` ranks (see `ShmHandleOptions` for the sizes). */
export function createShmHandle(size: number, options: ShmHandleOptions = {}): ShmHandle {
  const pairs = Math.max(1, size * (size - 1));
  const bytes =
    options.capacity ?? Math.min(4 << 20, Math.max(64 << 10, Math.floor((64 << 20) / pairs)));
  const rounded = Math.max(64, Math.floor(bytes / 64) * 64);
  const { total } = shmOffsets(size, rounded);
  const slotBytes = Math.max(64 * size, Math.floor((options.slotBytes ?? 1 << 20) / 64) * 64);
  const registeredStart = arenaRegisteredStart(size, slotBytes);
  const pages = Math.max(1, Math.ceil(registeredStart / 65536));
  const registeredBytes = options.registeredBytes ?? DEFAULT_REGISTERED_BYTES;
  const registeredPages = Math.ceil(registeredBytes / 65536);
  const maximum = Math.min(MAX_PAGES, pages + registeredPages);
  const arena = new WebAssembly.Memory({ initial: pages, maximum, shared: true });
  new Int32Array(arena.buffer)[arenaAllocatorWord(size)] = registeredStart / 64;
  // Past the arena: segments of up to 2 GiB, the first 64 bytes of each its allocator's word.
  const segments = segmentPages(registeredPages - (maximum - pages)).map((limit) => {
    const segment = new WebAssembly.Memory({ initial: 1, maximum: limit, shared: true });
    new Int32Array(segment.buffer)[0] = 1;
    return segment;
  });
  return {
    segments,
    registeredBytes,
    buffer: new SharedArrayBuffer(total),
    progress: createProgressBuffer(size),
    size,
    capacity: rounded,
    arena,
    slotBytes,
    spinMicros:
      options.spinMicros ??
      ((options.cores ?? size) < size ? SPIN_MICROS_SHARED : SPIN_MICROS_DEDICATED),
  };
}

/** Ring every rank's doorbell and barrier gate. */
export function ringAllBells(handle: ShmHandle): void {
  const words = new Int32Array(handle.buffer);
  const offsets = shmOffsets(handle.size, handle.capacity);
  for (let rank = 0; rank < handle.size; rank++) {
    for (const index of [offsets.bell(rank), offsets.gate(rank)]) {
      Atomics.add(words, index, 1);
      Atomics.notify(words, index);
    }
  }
}

/** Whether an abort reason is published in `words` (the handle's buffer as Int32): no allocation. */
export function shmAbortPublished(words: Int32Array): boolean {
  return Atomics.load(words, ABORT_STATE) === 2;
}

/** The world's abort reason, once one is complete; null while none (or while one is being written). */
export function readShmAbort(handle: ShmHandle): AbortReason | null {
  const words = new Int32Array(handle.buffer);
  if (Atomics.load(words, ABORT_STATE) !== 2) return null;
  const length = Atomics.load(words, ABORT_LENGTH);
  const offsets = shmOffsets(handle.size, handle.capacity);
  const text = new TextDecoder().decode(
    new Uint8Array(handle.buffer, offsets.abortText, length).slice(),
  );
  return JSON.parse(text) as AbortReason;
}

/**
 * Publish an abort to every rank: the first writer wins and the others adopt its reason. Safe from
 * any thread, the parent included (that is how a dead worker is reported). Returns the reason in
 * force.
 */
export function writeShmAbort(handle: ShmHandle, reason: AbortReason): AbortReason {
  const words = new Int32Array(handle.buffer);
  if (Atomics.compareExchange(words, ABORT_STATE, 0, 1) === 0) {
    const offsets = shmOffsets(handle.size, handle.capacity);
    let encoded = new TextEncoder().encode(JSON.stringify(reason));
    if (encoded.length > ABORT_TEXT_BYTES) {
      encoded = new TextEncoder().encode(
        JSON.stringify({ ...reason, message: reason.message.slice(0, ABORT_TEXT_BYTES / 4) }),
      );
    }
    new Uint8Array(handle.buffer, offsets.abortText, encoded.length).set(encoded);
    Atomics.store(words, ABORT_LENGTH, encoded.length);
    Atomics.store(words, ABORT_STATE, 2);
    ringAllBells(handle);
    return reason;
  }
  while (Atomics.load(words, ABORT_STATE) !== 2) {
    // Another thread is writing its reason: a few hundred bytes, wait for it.
  }
  return readShmAbort(handle)!;
}
