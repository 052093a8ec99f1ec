import { type ReduceLayout, type ReduceMemory, reduceStagingBytes } from '../algorithms/reduce.js';
import type { ReduceArena, ReduceOp } from '../kernels/reduce.js';
import type { CommDType } from '../operand.js';

/** `segmentBytes: 'auto'`: the smallest ring segment, and how far it may grow for large ops. */
const AUTO_SEGMENT_BYTES = 1 << 20;
const AUTO_SEGMENT_GROWTH = 4;
/** Ring receives posted ahead, in segments of the smallest size (see [Note: ring segments and window]). */
const RING_WINDOW = 16;

/** What the ring's sizes depend on: the group's `segmentBytes` option and its number of ranks. */
export interface RingSettings {
  readonly segmentBytes: number | 'auto';
  readonly size: number;
}

/** The smallest segment, and the only one when `segmentBytes` is a number. */
function baseSegmentBytes(settings: RingSettings): number {
  const { segmentBytes } = settings;
  return segmentBytes === 'auto' ? AUTO_SEGMENT_BYTES : segmentBytes;
}

/** Staging the ring's receive slots may take (see the Note below). */
export function ringStagingBytes(settings: RingSettings): number {
  return RING_WINDOW * baseSegmentBytes(settings);
}

/** The segment for pipelining `chunkBytes` per rank, in bytes; see the Note below. */
function segmentFor(settings: RingSettings, chunkBytes: number): number {
  const base = baseSegmentBytes(settings);
  if (settings.segmentBytes !== 'auto' || chunkBytes <= 8 * base) return base;
  const grown = 2 ** Math.ceil(Math.log2(chunkBytes / 8));
  return Math.min(AUTO_SEGMENT_GROWTH * base, grown);
}

/** Segment bytes (whole elements) for byte-moving schedules over chunks of `chunkBytes`. */
export function segmentBytes(settings: RingSettings, element: number, chunkBytes: number): number {
  const segment = segmentFor(settings, chunkBytes);
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
export function reduceLayout(
  arena: ReduceArena,
  settings: RingSettings,
  op: ReduceOp,
  dtype: CommDType,
  count: number,
  directElements: number,
): ReduceLayout {
  const { segmentElements, window } = ringShape(settings, count);
  const workBytes = Math.ceil((count * 4) / 16) * 16;
  const direct = directElements > 0;
  const staging = reduceStagingBytes(
    direct,
    directElements,
    settings.size,
    segmentElements,
    window,
  );
  arena.ensure(workBytes + staging + 16);
  return {
    arena,
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
export function ringLayout(
  memory: ReduceMemory,
  settings: RingSettings,
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
    ...ringShape(settings, count),
  };
}

/** `ringLayout` in the group's arena, for an input outside it: only staging, no work region. */
export function streamedLayout(
  arena: ReduceArena,
  settings: RingSettings,
  op: ReduceOp,
  dtype: CommDType,
  count: number,
): ReduceLayout {
  const layout = ringLayout(arena, settings, op, dtype, count, -1);
  arena.ensure(2 * layout.window * layout.segmentElements * 4 + 16);
  return layout;
}

/** Ring segments (elements) and receives posted ahead for `count` elements; see the Note above. */
function ringShape(
  settings: RingSettings,
  count: number,
): { segmentElements: number; window: number } {
  const chunkElements = Math.ceil(count / settings.size);
  const segmentBytes = segmentFor(settings, chunkElements * 4);
  const segmentElements = Math.max(4, Math.floor(segmentBytes / 16) * 4);
  const segmentsPerChunk = Math.ceil(chunkElements / segmentElements);
  const slots = Math.floor(ringStagingBytes(settings) / (segmentElements * 4));
  const window = Math.max(1, Math.min(slots, (settings.size - 1) * segmentsPerChunk));
  return { segmentElements, window };
}
