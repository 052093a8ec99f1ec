import type { ReduceKernels, ReduceOp } from '../kernels/reduce.js';
import { type Comm, mod, segments } from './comm.js';
import { CLEAR_TO_SEND_BYTES } from './gather.js';

/** WASM memory the ring reduces in: the group's `ReduceArena`, or a `RegisteredMemory`. */
export interface ReduceMemory extends ReduceKernels {
  bytes(offset: number, length: number): Uint8Array;
}

/** Where an op's data lies in the group's arena: 4-byte elements at `work`, scratch at `staging`. */
export interface ReduceLayout {
  readonly arena: ReduceMemory;
  readonly op: ReduceOp;
  readonly dtype: 'f32' | 'i32';
  /** Byte offset of the elements being reduced. */
  readonly work: number;
  /** Byte offset of the scratch space (see `reduceStagingBytes`). */
  readonly staging: number;
  /** Elements per ring segment. */
  readonly segmentElements: number;
  /** Ring segments received ahead (staging slots). */
  readonly window: number;
}

/**
 * Where a ring reduction reads this rank's contribution and puts its results. Offsets are in
 * 4-byte elements of the whole operand (`count` elements).
 */
export interface RingOperands {
  /**
   * This rank's contribution (`count * 4` bytes, any memory), or null when it already lies in the
   * arena at `layout.work` (f16/bf16 widened there, or a registered all-reduce's buffer). Pieces
   * are copied into forward slots only where they are reduced ([Note: ring operands in staging]).
   */
  readonly input: Uint8Array | null;
  /**
   * Where the reduced elements of chunk `rank` go, or null to leave them at `layout.work`.
   * `result[0]` is element `resultBase` of the operand.
   */
  readonly result: Uint8Array | null;
  readonly resultBase: number;
  /**
   * Reduce-scatter of registered memory ([Note: registered memory on the tcp transport]): `input`
   * is a view of `layout.arena`, read in place at its byte offset and never written; `result` is
   * the byte offset of `result` when that lies in the arena too (else -1).
   */
  readonly registered?: { readonly result: number };
  /** All-reduce: gather every chunk's result here (`count * 4` bytes); null for reduce-scatter. */
  readonly gather: Uint8Array | null;
  /** Multiply the final elements by this (avg), or null. */
  readonly scale: number | null;
}

/*
 * [Note: ring operands in staging]
 * A ring whose input lies outside the arena (`RingOperands.input`) needs no copy of the operand
 * there: each piece of this rank's contribution is copied into a forward slot (one of `window`
 * after the receive slots) just before it is reduced with the received piece, and forwarded from
 * that slot; a final piece is scaled there and copied out to `result`. The arena then holds only
 * staging, 2 x `window` segments (at most 32 MiB with `segmentBytes: 'auto'`), whatever the
 * operand's size; before, a 64 MiB all-reduce grew it by 64 MiB and kept it. A slot is rewritten
 * only once the send from it completed: a send may read its view until then (rule 4 of the
 * transport contract). A registered input is read in place instead (`reduceTo`), with the same
 * operand order, so every path gives the same bits.
 */

/*
 * [Note: a ring asks before it sends]
 * A ring's first step sends this rank's first chunk (a size-th of the operand) to its right
 * whatever the right is doing, and the next step's piece follows as soon as the left's arrives:
 * to a right that has not begun the op, up to two chunks of every op in flight arrive as messages
 * no receive has claimed, and past the transports' budget for those ([Note: the unexpected-message
 * budget], 256 MiB a peer) the group aborts (`allreduce-late.test.ts`: 4 all-reduces of 24 MiB in
 * flight, 3 ranks, the last 1.5 s late, a 16 MiB budget: rank 2 held 15 MiB and aborted). So a
 * ring over more than `CLEAR_TO_SEND_BYTES` (16 MiB) does what a large broadcast does ([Note: a
 * broadcast asks before it sends]): each rank posts its first receives, sends its left one byte,
 * and sends nothing to its right before the right's byte is in. A late right then holds nothing of
 * the op but that byte. The cost is one latency a large op, between ranks that arrive together.
 * Not covered here: a right that has begun the op and moves it slower than its left sends (its
 * thread busy while its transport reads on), which holds what passes its window of receives; DDP
 * on 3 thread ranks of GPT-2 124M aborted its first step so (rank 1 held 265 796 608 bytes from
 * rank 0, the same with this change). Those bytes are the op's own: [Note: an op's own bytes are
 * expected] in transports/expected-bytes.ts keeps them out of the budget.
 */

/**
 * Ring reduce-scatter, and for an all-reduce the ring all-gather fused behind it.
 *
 * [Note: the fused ring]
 * Step k of the reduce-scatter sends chunk `rank - k - 1` and receives chunk `rank - k - 2` into
 * a staging slot of the arena; this rank's own contribution to the piece is copied into a forward
 * slot only then (see [Note: ring operands in staging]), reduced with the WASM kernel, and the
 * segment is forwarded to the right as soon as it is reduced, so segments stream around the
 * ring. At the last step the piece is final: it is scaled (avg), written to `result`, and for
 * an all-reduce sent on at once as the all-gather's first segment, instead of after the whole
 * reduce-scatter. On two ranks this is the direct exchange of halves, pipelined per segment. The
 * all-gather receives go straight into `gather` (the user's buffer for f32/i32); they are posted
 * right after the last reduce-scatter receive, so the transport matches them in order. Up to
 * `window` reduce-scatter receives are posted ahead; staging slots are reused in turn. Each chunk
 * is reduced in a fixed order around the ring and its final value computed by exactly one rank,
 * which makes the all-reduce bit-identical on all ranks.
 */
export async function ringReduce(
  comm: Comm,
  layout: ReduceLayout,
  chunk: (index: number) => [number, number],
  io: RingOperands,
): Promise<void> {
  const { rank, size } = comm;
  if (size === 1) return;
  const { arena, segmentElements, window } = layout;
  const right = mod(rank + 1, size);
  const left = mod(rank - 1, size);
  const workBytes = (piece: [number, number]) =>
    arena.bytes(layout.work + piece[0] * 4, piece[1] * 4);
  const { input, result, gather } = io;
  const inputBytes = (piece: [number, number]) =>
    input === null ? workBytes(piece) : input.subarray(piece[0] * 4, (piece[0] + piece[1]) * 4);
  const gatherBytes = (piece: [number, number]) =>
    gather!.subarray(piece[0] * 4, (piece[0] + piece[1]) * 4);
  const sends: Promise<void>[] = [];
  // [Note: a ring asks before it sends]: the right's word comes first from it (two ranks: before
  // the data, which the same peer sends after it), so it is the first receive posted.
  let total = 0;
  for (let c = 0; c < size; c++) total += chunk(c)[1];
  const large = total * 4 > CLEAR_TO_SEND_BYTES;
  const clearedByRight = large ? comm.recv(right, new Uint8Array(1)) : null;
  const items: { step: number; piece: [number, number] }[] = [];
  for (let step = 0; step < size - 1; step++) {
    const [start, length] = chunk(mod(rank - step - 2, size));
    for (const piece of segments(start, length, segmentElements)) items.push({ step, piece });
  }
  const gathers: { step: number; piece: [number, number]; done: Promise<void> | null }[] = [];
  if (gather !== null) {
    for (let step = 0; step < size - 1; step++) {
      const [start, length] = chunk(mod(rank - step - 1, size));
      for (const piece of segments(start, length, segmentElements))
        gathers.push({ step, piece, done: null });
    }
  }
  // [Note: an op's own bytes are expected]: all the left sends of this op, held outside the budget
  // for unclaimed messages when it comes faster than this rank moves the op.
  let fromLeft = 0;
  for (const item of items) fromLeft += item.piece[1] * 4;
  for (const item of gathers) fromLeft += item.piece[1] * 4;
  const word = large && left === right ? 1 : 0;
  const release = comm.expect?.(left, fromLeft + word, items.length + gathers.length + word);
  try {
    const postGathers = () => {
      for (const item of gathers) item.done = comm.recv(left, gatherBytes(item.piece));
    };
    const slotBytes = segmentElements * 4;
    const posted: Promise<void>[] = [];
    const post = (i: number) => {
      const item = items[i]!;
      const slot = i % window;
      posted[slot] = comm.recv(
        left,
        arena.bytes(layout.staging + slot * slotBytes, item.piece[1] * 4),
      );
      if (i === items.length - 1) postGathers();
    };
    if (items.length === 0) postGathers();
    for (let i = 0; i < Math.min(window, items.length); i++) post(i);
    // This rank's receives are posted: the left may send. Then wait for the right's word.
    if (large) {
      sends.push(comm.send(left, new Uint8Array(1)));
      await clearedByRight;
    }
    const [firstStart, firstLength] = chunk(mod(rank - 1, size));
    for (const piece of segments(firstStart, firstLength, segmentElements)) {
      sends.push(comm.send(right, inputBytes(piece)));
    }
    const { registered } = io;
    // With an input, partial results go to `window` forward slots after the receive slots.
    const forwards: Promise<void>[] = [];
    for (let i = 0; i < items.length; i++) {
      const item = items[i]!;
      const slot = i % window;
      await posted[slot];
      const [start, length] = item.piece;
      const last = item.step === size - 2;
      const received = layout.staging + slot * slotBytes;
      const forward = layout.staging + (window + slot) * slotBytes;
      let at: number;
      if (input === null) {
        // The operand lies in the arena: reduced where it is.
        at = layout.work + start * 4;
        arena.reduce(layout.op, layout.dtype, at, received, length);
      } else if (registered !== undefined) {
        if (!last) await forwards[slot];
        at = !last ? forward : registered.result >= 0 ? registered.result : received;
        if (last && registered.result >= 0) at += (start - io.resultBase) * 4;
        // `own op received`, the operand order of the other paths: the same bits.
        arena.reduceTo(layout.op, layout.dtype, at, input.byteOffset + start * 4, received, length);
      } else {
        at = forward;
        await forwards[slot];
        arena.bytes(at, length * 4).set(inputBytes(item.piece));
        arena.reduce(layout.op, layout.dtype, at, received, length);
      }
      // A final piece left in its receive slot frees the slot only once copied out, below.
      const slotHeld = at === received;
      if (i + window < items.length && !slotHeld) post(i + window);
      if (!last) {
        const sent = comm.send(right, arena.bytes(at, length * 4));
        if (input !== null) forwards[slot] = sent;
        sends.push(sent);
        continue;
      }
      if (io.scale !== null) arena.scale(at, length, io.scale);
      let final = arena.bytes(at, length * 4);
      const inPlace = registered !== undefined && registered.result >= 0;
      if (result !== null && !inPlace) {
        const offset = (start - io.resultBase) * 4;
        result.set(final, offset);
        final = result.subarray(offset, offset + length * 4);
      }
      if (slotHeld && i + window < items.length) post(i + window);
      if (gather !== null) sends.push(comm.send(right, final));
    }
    for (const item of gathers) {
      await item.done;
      if (item.step < size - 2) sends.push(comm.send(right, gatherBytes(item.piece)));
    }
    await Promise.all(sends);
  } finally {
    release?.();
  }
}

/**
 * Reduce-scatter for small messages: each rank sends every other rank that rank's chunk directly,
 * then folds the `size` contributions to its own chunk in rank order (0, 1, 2, ...), the same order
 * on every rank. Needs `(size) * chunk` elements of staging.
 */
export async function directReduceScatter(
  comm: Comm,
  layout: ReduceLayout,
  chunk: (index: number) => [number, number],
): Promise<void> {
  const { rank, size } = comm;
  if (size === 1) return;
  const { arena } = layout;
  const [ownStart, ownLength] = chunk(rank);
  const ownBytes = ownLength * 4;
  const slot = (peer: number) => layout.staging + peer * ownBytes;
  const sends: Promise<void>[] = [];
  const recvs: Promise<void>[] = [];
  for (let offset = 1; offset < size; offset++) {
    const peer = mod(rank + offset, size);
    const [start, length] = chunk(peer);
    if (length > 0) sends.push(comm.send(peer, arena.bytes(layout.work + start * 4, length * 4)));
    if (ownLength > 0) recvs.push(comm.recv(peer, arena.bytes(slot(peer), ownBytes)));
  }
  await Promise.all(recvs);
  await Promise.all(sends);
  if (ownLength === 0) return;
  const own = layout.work + ownStart * 4;
  if (rank !== 0) {
    arena.bytes(slot(rank), ownBytes).set(arena.bytes(own, ownBytes));
    arena.bytes(own, ownBytes).set(arena.bytes(slot(0), ownBytes));
  }
  for (let peer = 1; peer < size; peer++)
    arena.reduce(layout.op, layout.dtype, own, slot(peer), ownLength);
}

/**
 * Staging bytes the reduce-scatters need: the direct one keeps every rank's `ownElements`
 * (the whole operand for an all-reduce, a chunk for a reduce-scatter), the ring `window` segments.
 */
export function reduceStagingBytes(
  direct: boolean,
  ownElements: number,
  size: number,
  segmentElements: number,
  window: number,
): number {
  if (direct) return Math.ceil(ownElements / 4) * 4 * size * 4;
  return segmentElements * 4 * window;
}
