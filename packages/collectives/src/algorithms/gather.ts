import { type Comm, mod, segments } from './comm.js';

/**
 * Copies this rank's chunk into its place in `buffer`, unless `own` already is that place (an
 * all-gather in place).
 */
export function placeOwn(buffer: Uint8Array, own: Uint8Array, start: number): void {
  if (own.buffer === buffer.buffer && own.byteOffset === buffer.byteOffset + start) return;
  buffer.set(own, start);
}

/**
 * All-gather of byte chunks: this rank's chunk `own` goes to `chunk(rank)` of `buffer`, and on
 * return `buffer` holds every chunk. Ring schedule: at step k a rank sends chunk `rank - k` to
 * its right neighbour and receives chunk `rank - k - 1` from its left one, straight into its place;
 * each segment is forwarded as soon as it has arrived. Bandwidth-optimal: each rank sends
 * (size - 1) / size of the buffer. The own chunk is sent from `own` and copied into place only
 * once every transfer is under way, so the copy overlaps the peers' sends instead of delaying them.
 */
export async function ringAllGather(
  comm: Comm,
  buffer: Uint8Array,
  own: Uint8Array,
  chunk: (index: number) => [number, number],
  segmentBytes: number,
): Promise<void> {
  const { rank, size } = comm;
  const [ownStart, ownLength] = chunk(rank);
  if (size === 1) {
    placeOwn(buffer, own, ownStart);
    return;
  }
  const right = mod(rank + 1, size);
  const left = mod(rank - 1, size);
  const sends: Promise<void>[] = [];
  const view = (piece: [number, number]) => buffer.subarray(piece[0], piece[0] + piece[1]);
  for (const piece of segments(0, ownLength, segmentBytes))
    sends.push(comm.send(right, own.subarray(piece[0], piece[0] + piece[1])));
  const items: { step: number; piece: [number, number]; done: Promise<void> }[] = [];
  for (let step = 0; step < size - 1; step++) {
    const [start, length] = chunk(mod(rank - step - 1, size));
    for (const piece of segments(start, length, segmentBytes)) {
      items.push({ step, piece, done: comm.recv(left, view(piece)) });
    }
  }
  placeOwn(buffer, own, ownStart);
  for (const item of items) {
    await item.done;
    if (item.step < size - 2) sends.push(comm.send(right, view(item.piece)));
  }
  await Promise.all(sends);
}

/**
 * All-gather for small messages: every rank sends its chunk `own` to every other rank directly
 * (and copies it into its place in `buffer`).
 */
export async function directAllGather(
  comm: Comm,
  buffer: Uint8Array,
  own: Uint8Array,
  chunk: (index: number) => [number, number],
): Promise<void> {
  const { rank, size } = comm;
  const [ownStart, ownLength] = chunk(rank);
  placeOwn(buffer, own, ownStart);
  const pending: Promise<void>[] = [];
  for (let offset = 1; offset < size; offset++) {
    const peer = mod(rank + offset, size);
    if (ownLength > 0) pending.push(comm.send(peer, own));
    const [start, length] = chunk(peer);
    if (length > 0) pending.push(comm.recv(peer, buffer.subarray(start, start + length)));
  }
  await Promise.all(pending);
}

/**
 * Broadcasts of more bytes than this ask before they send ([Note: a broadcast asks before it
 * sends]): 16 MiB, some 6 s at 20 Mbit/s and 10 ms on loopback, against the one round trip the
 * asking adds.
 */
export const CLEAR_TO_SEND_BYTES = 16 << 20;

/**
 * [Note: a broadcast asks before it sends]
 * A broadcast's sender does not wait for anything of its receivers, so a receiver that is late to
 * the call (a rank still building its model, a tab still loading) receives the whole buffer as
 * messages no receive has claimed; past the transport's budget for those ([Note: the
 * unexpected-message budget], 256 MiB a peer) that aborts the group. It did at GPT-2 size: DiLoCo's
 * first broadcast of the global copy, 495 MB from rank 0 to a rank 1 that was later to the call,
 * over ws. So above `CLEAR_TO_SEND_BYTES` each receiver posts its receives first and then sends
 * its sender one byte, and the sender sends nothing to it before that byte is in: what a late
 * receiver holds unclaimed is that byte, and the cost is one latency between ranks that arrive
 * together. MPI's rendezvous protocol for large messages does the same in the transport.
 */
async function cleared(comm: Comm, from: number, large: boolean): Promise<void> {
  if (large) await comm.recv(from, new Uint8Array(1));
}

/** Tells `to` that this rank's receives are posted (a large broadcast only). */
function clear(comm: Comm, to: number, large: boolean): Promise<void> {
  return large ? comm.send(to, new Uint8Array(1)) : Promise.resolve();
}

/**
 * Broadcast from `root`. Small buffers (or two ranks) go from the root to each rank directly;
 * large ones down a pipelined chain root -> root+1 -> ..., each segment forwarded on arrival, so
 * the time is about one buffer's transfer plus (size - 2) segments. Above `CLEAR_TO_SEND_BYTES`
 * nothing is sent to a rank before it asked ([Note: a broadcast asks before it sends]).
 */
export async function broadcastBytes(
  comm: Comm,
  buffer: Uint8Array,
  root: number,
  segmentBytes: number,
  direct: boolean,
): Promise<void> {
  const { rank, size } = comm;
  if (size === 1 || buffer.byteLength === 0) return;
  const large = buffer.byteLength > CLEAR_TO_SEND_BYTES;
  if (direct || size === 2) {
    if (rank !== root) {
      const arrival = comm.recv(root, buffer);
      await Promise.all([arrival, clear(comm, root, large)]);
      return;
    }
    const sends: Promise<void>[] = [];
    for (let peer = 0; peer < size; peer++) {
      if (peer !== root) sends.push(cleared(comm, peer, large).then(() => comm.send(peer, buffer)));
    }
    await Promise.all(sends);
    return;
  }
  const position = mod(rank - root, size);
  const next = mod(rank + 1, size);
  const previous = mod(rank - 1, size);
  const pieces = segments(0, buffer.byteLength, segmentBytes);
  const view = (piece: [number, number]) => buffer.subarray(piece[0], piece[0] + piece[1]);
  const sends: Promise<void>[] = [];
  // The next rank's receives are posted once its byte is in (the last rank sends nothing on).
  const nextReady = position < size - 1 ? cleared(comm, next, large) : Promise.resolve();
  if (position === 0) {
    await nextReady;
    for (const piece of pieces) sends.push(comm.send(next, view(piece)));
  } else {
    const arrivals = pieces.map((piece) => comm.recv(previous, view(piece)));
    sends.push(clear(comm, previous, large));
    for (let i = 0; i < pieces.length; i++) {
      await arrivals[i];
      if (i === 0) await nextReady;
      if (position < size - 1) sends.push(comm.send(next, view(pieces[i]!)));
    }
  }
  await Promise.all(sends);
}
