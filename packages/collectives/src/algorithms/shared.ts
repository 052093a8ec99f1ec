import type { ReduceOp } from '../kernels/reduce.js';
import { type CommDType, type HostData, narrow, widen } from '../operand.js';
import { shardRange } from '../shard.js';
import type { SharedArena } from '../shared-arena.js';

/**
 * [Note: shared-memory collectives]
 * When every rank maps the same memory (the shm transport's `SharedArena`), a collective needs no
 * messages at all, only copies and barriers. Data goes in rounds of at most one slot per rank:
 *
 * - all-reduce: each rank widens its piece of the input into its own slot; barrier; each rank
 *   reduces its 1/n slice of the piece in place in slot 0, reading every other slot in rank order
 *   (0, 1, 2, ...) with the WASM SIMD kernel; barrier; each rank narrows the whole piece out of
 *   slot 0. Every element is reduced by exactly one rank, so the result is bit-identical on all
 *   ranks, and the work is split evenly whatever the size. Messages of several rounds run as a
 *   pipeline with one barrier per round instead of two: between two barriers a rank reduces its
 *   slice of round k, widens round k + 1's piece into the next set, and after the barrier narrows
 *   round k's result out while the next slices are reduced (rounds + 1 barriers in all; under
 *   load every barrier is a wake-up, so halving them matters more than the copies).
 * - reduce-scatter: a round carries one piece of EVERY shard (each slot holds n pieces), so each
 *   rank reduces its own shard's piece every round (no rank idles while another reduces); one
 *   barrier per round.
 * - all-gather: each rank copies its shard's piece into its slot; barrier; each rank copies every
 *   slot out.
 * - broadcast: the root copies a piece of a whole set (n slots) in; barrier; the others copy out.
 *
 * Rounds cycle through the arena's three sets (`SHARED_ARENA_SETS`). A phase (the work between two
 * barriers) touches at most three consecutive sets: it reads the set of the round before (the
 * all-reduce's narrowing), works in the current one and writes the next. A set is written again
 * three rounds later, so every rank that read it has passed a barrier in between; with the
 * one-barrier-per-round schedules (reduce-scatter, all-gather, broadcast) two sets would do. The
 * round counter and the barrier epochs continue across ops, so the same holds from one op to the
 * next. The arena's size is fixed by the transport (3 * n slots), whatever the message size.
 */
export interface SharedStep {
  readonly rank: number;
  readonly size: number;
  readonly arena: SharedArena;
  /** The arena's barrier, reporting to the op's deadline who is missing. */
  barrier(): Promise<void>;
}

/**
 * Every rank's registered operand of an op, all in one segment of the arena's registered memory
 * ([Note: growing registered memory]): `offsets[r]` is rank r's byte offset in it.
 */
export interface RegisteredOperands {
  readonly segment: number;
  readonly offsets: readonly number[];
}

function work(
  dtype: 'f32' | 'i32',
  buffer: SharedArrayBuffer,
  offset: number,
  length: number,
): Float32Array | Int32Array {
  return dtype === 'i32'
    ? new Int32Array(buffer, offset, length)
    : new Float32Array(buffer, offset, length);
}

function clamp(length: number, at: number, per: number): number {
  return Math.max(0, Math.min(per, length - at));
}

/** All-reduce `host` in place through the arena (see the note: a pipeline of rounds). */
export async function sharedAllReduce(
  step: SharedStep,
  dtype: CommDType,
  host: HostData,
  op: ReduceOp,
): Promise<void> {
  const { arena, rank, size } = step;
  const kind = dtype === 'i32' ? 'i32' : 'f32';
  const { buffer, slotBytes } = arena;
  const per = slotBytes / 4;
  const rounds = Math.ceil(host.length / per);
  if (rounds === 0) return;
  const piece = (k: number) => host.subarray(k * per, Math.min(host.length, (k + 1) * per));
  let base = arena.nextRound();
  widen(dtype, piece(0), work(kind, buffer, base + rank * slotBytes, piece(0).length));
  await step.barrier();
  for (let k = 0; k < rounds; k++) {
    const length = piece(k).length;
    const slice = shardRange(length, size, rank);
    if (slice.count > 0) {
      const dst = base + slice.start * 4;
      for (let peer = 1; peer < size; peer++)
        arena.reduce(op, kind, dst, dst + peer * slotBytes, slice.count);
      if (op === 'avg') arena.scale(dst, slice.count, 1 / size);
    }
    const reduced = base;
    if (k + 1 < rounds) {
      base = arena.nextRound();
      const next = piece(k + 1);
      widen(dtype, next, work(kind, buffer, base + rank * slotBytes, next.length));
    }
    // Every slice of round k is reduced and every piece of round k + 1 is in.
    await step.barrier();
    narrow(dtype, work(kind, buffer, reduced, length), piece(k));
  }
}

/** Elements reduced and copied out per piece of the registered all-reduce (256 KiB: in cache). */
const REGISTERED_PIECE = 1 << 16;

/**
 * All-reduce of registered buffers in place (see [Note: registered buffers] in
 * group/registered-buffers.ts): `offsets[r]` is rank r's operand in the arena. The fingerprint exchange was the barrier that
 * says every operand is ready; each rank then owns its 1/n slice of every operand, so it reduces
 * the slice into rank 0's operand (in rank order, as `sharedAllReduce` does) and copies it into
 * the others' without any other rank touching those bytes. One barrier at the end.
 */
export async function sharedAllReduceRegistered(
  step: SharedStep,
  dtype: 'f32' | 'i32',
  { segment, offsets }: RegisteredOperands,
  count: number,
  op: ReduceOp,
): Promise<void> {
  const { rank, size } = step;
  const arena = step.arena.registered.segment(segment);
  const slice = shardRange(count, size, rank);
  const bytes = new Uint8Array(arena.buffer);
  for (let at = 0; at < slice.count; at += REGISTERED_PIECE) {
    const length = Math.min(REGISTERED_PIECE, slice.count - at);
    const from = (slice.start + at) * 4;
    const dst = offsets[0]! + from;
    for (let peer = 1; peer < size; peer++)
      arena.reduce(op, dtype, dst, offsets[peer]! + from, length);
    if (op === 'avg') arena.scale(dst, length, 1 / size);
    for (let peer = 1; peer < size; peer++)
      bytes.copyWithin(offsets[peer]! + from, dst, dst + length * 4);
  }
  await step.barrier();
}

/**
 * Reduce-scatter of registered inputs (`offsets[r]`, rank r's, each `count` elements): this rank
 * sums its shard of every input in rank order straight into `output` when that is registered too
 * (`outputOffset`), or piece by piece in its own arena slot and copies each piece out. The inputs
 * are only read; the final barrier keeps every rank from reusing its input before all have read it.
 */
export async function sharedReduceScatterRegistered(
  step: SharedStep,
  dtype: 'f32' | 'i32',
  { segment, offsets }: RegisteredOperands,
  count: number,
  output: HostData,
  outputOffset: number,
  op: ReduceOp,
): Promise<void> {
  const { rank, size } = step;
  const arena = step.arena.registered.segment(segment);
  if (outputOffset < 0 && segment !== 0) {
    throw new RangeError('[reduceScatter] an unregistered output needs inputs in segment 0');
  }
  const own = shardRange(count, size, rank);
  const slotBytes = step.arena.slotBytes;
  // Ranks whose outputs lie in the inputs' segment write in place while the others stage through
  // their slot, so no rank takes a round: one taken by some ranks only set their slots apart from
  // then on, and every later op read another op's bytes (issue 44, [Note: barrier stamps]).
  const scratch = outputOffset < 0 ? step.arena.upcomingRound() + rank * slotBytes : -1;
  const piece = outputOffset < 0 ? slotBytes / 4 : REGISTERED_PIECE;
  for (let at = 0; at < own.count; at += piece) {
    const length = Math.min(piece, own.count - at);
    const from = (own.start + at) * 4;
    const dst = outputOffset < 0 ? scratch : outputOffset + at * 4;
    // Rank 0's and rank 1's contributions in one pass (size >= 2 here), then the others.
    arena.reduceTo(op, dtype, dst, offsets[0]! + from, offsets[1]! + from, length);
    for (let peer = 2; peer < size; peer++)
      arena.reduce(op, dtype, dst, offsets[peer]! + from, length);
    if (op === 'avg') arena.scale(dst, length, 1 / size);
    if (outputOffset < 0) output.set(work(dtype, arena.buffer, dst, length), at);
  }
  await step.barrier();
}

/**
 * All-gather into registered outputs (`offsets[r]`, rank r's): this rank writes its shard straight
 * into every other rank's output; one barrier. `shard(r)` is `[byteOffset, byteLength]`.
 */
export async function sharedAllGatherRegistered(
  step: SharedStep,
  input: Uint8Array,
  { segment, offsets }: RegisteredOperands,
  shard: (rank: number) => [number, number],
): Promise<void> {
  const { rank, size } = step;
  const bytes = new Uint8Array(step.arena.registered.segment(segment).buffer);
  const [start] = shard(rank);
  for (let peer = 0; peer < size; peer++) {
    if (peer !== rank) bytes.set(input, offsets[peer]! + start);
  }
  await step.barrier();
}

/** Reduce-scatter `input` into this rank's shard `output` through the arena (see the note). */
export async function sharedReduceScatter(
  step: SharedStep,
  dtype: CommDType,
  input: HostData,
  output: HostData,
  op: ReduceOp,
): Promise<void> {
  const shards = Array.from({ length: step.size }, (_, r) =>
    shardRange(input.length, step.size, r),
  );
  await sharedReduceScatterShards(step, dtype, input, shards, output, dtype, op);
}

/**
 * `sharedReduceScatter` with any shards (`shards[r]`, rank r's range of `input`, in elements;
 * ranges need not be in rank order) and the result in `outDtype`: the two-level collectives keep
 * f16/bf16 partial sums in f32 (`outDtype` 'f32') and cut a node's block of the world's shards.
 */
export async function sharedReduceScatterShards(
  step: SharedStep,
  dtype: CommDType,
  input: HostData,
  shards: readonly { start: number; count: number }[],
  output: HostData,
  outDtype: CommDType,
  op: ReduceOp,
): Promise<void> {
  const { arena, rank, size } = step;
  const kind = dtype === 'i32' ? 'i32' : 'f32';
  const { buffer, slotBytes } = arena;
  const per = Math.floor(slotBytes / 4 / size);
  const own = shards[rank]!;
  const longest = Math.max(...shards.map((s) => s.count));
  for (let at = 0; at < longest; at += per) {
    const base = arena.nextRound();
    const mine = base + rank * slotBytes;
    for (let s = 0; s < size; s++) {
      const shard = shards[s]!;
      const length = clamp(shard.count, at, per);
      if (length === 0) continue;
      const from = shard.start + at;
      widen(
        dtype,
        input.subarray(from, from + length),
        work(kind, buffer, mine + s * per * 4, length),
      );
    }
    await step.barrier();
    const length = clamp(own.count, at, per);
    if (length === 0) continue;
    const dst = base + rank * per * 4;
    for (let peer = 1; peer < size; peer++)
      arena.reduce(op, kind, dst, dst + peer * slotBytes, length);
    if (op === 'avg') arena.scale(dst, length, 1 / size);
    narrow(outDtype, work(kind, buffer, dst, length), output.subarray(at, at + length));
  }
}

/**
 * All-gather bytes through the arena: `input` is this rank's shard (already in place in `output`),
 * `output` receives shard r at `shard(r)` (`[byteOffset, byteLength]`).
 */
export async function sharedAllGather(
  step: SharedStep,
  input: Uint8Array,
  output: Uint8Array,
  shard: (rank: number) => [number, number],
): Promise<void> {
  const { arena, rank, size } = step;
  const { buffer, slotBytes } = arena;
  let longest = 0;
  for (let peer = 0; peer < size; peer++) longest = Math.max(longest, shard(peer)[1]);
  for (let at = 0; at < longest; at += slotBytes) {
    const base = arena.nextRound();
    const length = clamp(input.byteLength, at, slotBytes);
    if (length > 0)
      new Uint8Array(buffer, base + rank * slotBytes, length).set(input.subarray(at, at + length));
    await step.barrier();
    for (let peer = 0; peer < size; peer++) {
      if (peer === rank) continue;
      const [start, bytes] = shard(peer);
      const piece = clamp(bytes, at, slotBytes);
      if (piece > 0) output.set(new Uint8Array(buffer, base + peer * slotBytes, piece), start + at);
    }
  }
}

/** Broadcast `bytes` of rank `root` through the arena, a whole set per round. */
export async function sharedBroadcast(
  step: SharedStep,
  bytes: Uint8Array,
  root: number,
): Promise<void> {
  const { arena, rank, size } = step;
  const per = arena.slotBytes * size;
  for (let at = 0; at < bytes.byteLength; at += per) {
    const base = arena.nextRound();
    const length = Math.min(per, bytes.byteLength - at);
    const window = new Uint8Array(arena.buffer, base, length);
    if (rank === root) window.set(bytes.subarray(at, at + length));
    await step.barrier();
    if (rank !== root) bytes.set(window, at);
  }
}
