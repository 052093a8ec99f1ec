import { NO_STAMP, type OpStamp } from '../../op-stamp.js';

/**
 * The header of a message on an shm ring (`ShmTransport`): tag, length, sender, op kind and op
 * seq, u32 each, little-endian. The last three are the message's op stamp, which the receive it
 * meets checks ([Note: op stamps]). Browser-safe.
 */
export const RING_HEADER_BYTES = 20;

/** What a ring header says. */
export interface RingHeader {
  readonly tag: number;
  readonly length: number;
  readonly sender: number;
  readonly stamp: OpStamp;
}

export function writeRingHeader(
  view: DataView,
  tag: number,
  length: number,
  sender: number,
  stamp: OpStamp,
): void {
  view.setUint32(0, tag, true);
  view.setUint32(4, length, true);
  view.setUint32(8, sender, true);
  view.setUint32(12, stamp.op, true);
  view.setUint32(16, stamp.seq, true);
}

export function readRingHeader(view: DataView): RingHeader {
  const op = view.getUint32(12, true);
  const seq = view.getUint32(16, true);
  return {
    tag: view.getUint32(0, true),
    length: view.getUint32(4, true),
    sender: view.getUint32(8, true),
    stamp: op === 0 && seq === 0 ? NO_STAMP : { op, seq },
  };
}
