import type { ReduceArena, ReduceOp } from '../kernels/reduce.js';
import { type Comm, mod, segments } from './comm.js';

/** Where an op's data lies in the group's arena: 4-byte elements at `work`, scratch at `staging`. */
export interface ReduceLayout {
  readonly arena: ReduceArena;
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
 * Ring reduce-scatter in place: on return, the elements of chunk `rank` (`chunk(rank)`, in
 * elements) hold the reduction over all ranks; the other chunks hold partial results.
 *
 * Step k sends chunk `rank - k - 1` and receives chunk `rank - k - 2` into a staging slot, reduces
 * it into place with the WASM kernel and forwards each segment to the right as soon as it is
 * reduced, so segments stream around the ring. Up to `window` receives are posted ahead; the staging
 * slots are reused in turn. Each chunk is reduced in a fixed order around the ring and its final
 * value computed by exactly one rank, which makes the all-reduce built on it bit-identical on all
 * ranks.
 */
export async function ringReduceScatter(
  comm: Comm,
  layout: ReduceLayout,
  chunk: (index: number) => [number, number],
): Promise<void> {
  const { rank, size } = comm;
  if (size === 1) return;
  const { arena, segmentElements, window } = layout;
  const right = mod(rank + 1, size);
  const left = mod(rank - 1, size);
  const workBytes = (piece: [number, number]) =>
    arena.bytes(layout.work + piece[0] * 4, piece[1] * 4);
  const sends: Promise<void>[] = [];
  const [firstStart, firstLength] = chunk(mod(rank - 1, size));
  for (const piece of segments(firstStart, firstLength, segmentElements)) {
    sends.push(comm.send(right, workBytes(piece)));
  }
  const items: { step: number; piece: [number, number] }[] = [];
  for (let step = 0; step < size - 1; step++) {
    const [start, length] = chunk(mod(rank - step - 2, size));
    for (const piece of segments(start, length, segmentElements)) items.push({ step, piece });
  }
  const slotBytes = segmentElements * 4;
  const posted: Promise<void>[] = [];
  const post = (i: number) => {
    const item = items[i]!;
    const slot = i % window;
    posted[slot] = comm.recv(
      left,
      arena.bytes(layout.staging + slot * slotBytes, item.piece[1] * 4),
    );
  };
  for (let i = 0; i < Math.min(window, items.length); i++) post(i);
  for (let i = 0; i < items.length; i++) {
    const item = items[i]!;
    const slot = i % window;
    await posted[slot];
    const [start, length] = item.piece;
    arena.reduce(
      layout.op,
      layout.dtype,
      layout.work + start * 4,
      layout.staging + slot * slotBytes,
      length,
    );
    if (item.step < size - 2) sends.push(comm.send(right, workBytes(item.piece)));
    if (i + window < items.length) post(i + window);
  }
  await Promise.all(sends);
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

/** Staging bytes the reduce-scatters need for `count` elements over `size` ranks. */
export function reduceStagingBytes(
  direct: boolean,
  count: number,
  size: number,
  segmentElements: number,
  window: number,
): number {
  if (direct) return Math.ceil(count / size) * size * 4;
  return segmentElements * 4 * window;
}
