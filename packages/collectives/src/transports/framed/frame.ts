import { knownOpKind, NO_STAMP, type OpStamp } from '../../op-stamp.js';

/**
 * The frame header the `tcp` and `ws` transports share. Browser-safe: no Node imports.
 *
 * [Note: network frames]
 * Every message is a 36-byte little-endian header, then `length` payload bytes:
 *
 *   0  magic u32 (`WSHD`)        4  version u8 (2), kind u8, op u8, reserved u8 (0)
 *   8  tag u32 (the group id)    12 seq u32 (n-th message from this sender on this tag)
 *   16 length u32 (low)          20 length u32 (high, < 2^21)
 *   24 sender rank u32           28 op seq u32
 *   32 check u32 (FNV-1a of bytes 0..31)
 *
 * The transport only sees groups as tags. `op` and `op seq` are the op stamp of a data frame (the
 * op's kind and sequence number in its group, [Note: op stamps]), zero on control frames: with
 * the tag, the sender and the length they say which op the message belongs to, and the receive it
 * meets checks them (`Mailbox`). The op's full fingerprint (dtype, count, root) is the process
 * group's and travels as its own message. The per-tag `seq` catches lost, duplicated or
 * reordered frames, and `check` catches garbage that happens to start with the magic. A receiver
 * validates every field before it trusts the length, and a frame that fails is a protocol
 * violation naming the peer: it aborts the transport, it never throws into the socket's callback.
 * A data frame's sender is its stamp's and is checked where it meets a receive; any other frame
 * naming another sender than its connection's peer is a violation at once.
 * Over TCP the payload follows the header on the stream; over WebSocket the header is one binary
 * message and a non-empty payload the next one. `relay`/`relayed` frames (ws only) carry a whole
 * inner frame as their payload, for ranks that reach each other through a third ([Note: ws
 * connections]); over TCP they are violations. Version 1 headers (32 bytes, no op stamp) are
 * refused.
 */

export const FRAME_MAGIC = 0x44485357;
export const FRAME_VERSION = 2;
export const HEADER_BYTES = 36;
const CHECK_AT = HEADER_BYTES - 4;

/** Frame kinds. */
export const FrameKind = {
  /** A message for `recv`. */
  data: 1,
  /** First frame on a connection: rank, world size and the join token. */
  hello: 2,
  /** The sender aborted; the payload is the JSON abort reason. */
  abort: 3,
  /** The sender closed its transport cleanly; its sockets closing next is not a failure. */
  bye: 4,
  /** ws only: forward the frame in the payload to rank `tag` (a browser talking to a browser). */
  relay: 5,
  /** ws only: a frame relayed from rank `tag`; the payload is that rank's frame. */
  relayed: 6,
} as const;
export type FrameKind = (typeof FrameKind)[keyof typeof FrameKind];

/** The name of a frame kind, for messages. */
export function frameKindName(kind: number): string {
  const entry = Object.entries(FrameKind).find(([, value]) => value === kind);
  return entry === undefined ? `kind ${kind}` : entry[0];
}

/** Largest hello or abort payload accepted. */
export const MAX_CONTROL_BYTES = 64 << 10;

export interface FrameHeader {
  kind: FrameKind;
  tag: number;
  seq: number;
  length: number;
  sender: number;
  /** A data frame's op stamp ([Note: op stamps]); `NO_STAMP` when not given. */
  stamp?: OpStamp;
}

function fnv1a(bytes: Uint8Array, end: number): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < end; i++) {
    hash ^= bytes[i]!;
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}

/** Writes a header into `target` (`HEADER_BYTES` at `offset`). */
export function writeHeader(target: Uint8Array, header: FrameHeader, offset = 0): void {
  const view = new DataView(target.buffer, target.byteOffset + offset, HEADER_BYTES);
  const stamp = header.stamp ?? NO_STAMP;
  view.setUint32(0, FRAME_MAGIC, true);
  view.setUint8(4, FRAME_VERSION);
  view.setUint8(5, header.kind);
  view.setUint8(6, stamp.op);
  view.setUint8(7, 0);
  view.setUint32(8, header.tag, true);
  view.setUint32(12, header.seq, true);
  view.setUint32(16, header.length % 0x1_0000_0000, true);
  view.setUint32(20, Math.floor(header.length / 0x1_0000_0000), true);
  view.setUint32(24, header.sender, true);
  view.setUint32(28, stamp.seq, true);
  const bytes = target.subarray(offset, offset + HEADER_BYTES);
  view.setUint32(CHECK_AT, fnv1a(bytes, CHECK_AT), true);
}

/**
 * Reads and validates a header. Returns a reason string for anything malformed: bad magic,
 * version, kind, check word, reserved bits, or a length above `maxLength` (control frames are
 * capped at `MAX_CONTROL_BYTES`).
 */
export function readHeader(
  source: Uint8Array,
  maxLength: number,
  offset = 0,
): FrameHeader | string {
  if (source.byteLength - offset < HEADER_BYTES) return 'truncated header';
  const view = new DataView(source.buffer, source.byteOffset + offset, HEADER_BYTES);
  const magic = view.getUint32(0, true);
  if (magic !== FRAME_MAGIC) return `bad magic 0x${magic.toString(16).padStart(8, '0')}`;
  if (view.getUint8(4) !== FRAME_VERSION) return `unsupported frame version ${view.getUint8(4)}`;
  const check = view.getUint32(CHECK_AT, true);
  if (check !== fnv1a(source.subarray(offset, offset + HEADER_BYTES), CHECK_AT)) {
    return 'header check word does not match';
  }
  const kind = view.getUint8(5);
  if (kind < FrameKind.data || kind > FrameKind.relayed) return `unknown frame kind ${kind}`;
  if (view.getUint8(7) !== 0) return 'reserved header bits are set';
  const op = view.getUint8(6);
  const opSeq = view.getUint32(28, true);
  if (!knownOpKind(op)) return `unknown op kind ${op}`;
  if (kind !== FrameKind.data && (op !== 0 || opSeq !== 0)) return 'op stamp on a control frame';
  const high = view.getUint32(20, true);
  const length = high * 0x1_0000_0000 + view.getUint32(16, true);
  const limit =
    kind === FrameKind.data
      ? maxLength
      : kind === FrameKind.relay || kind === FrameKind.relayed
        ? maxLength + HEADER_BYTES
        : MAX_CONTROL_BYTES;
  if (high >= 1 << 21 || length > limit) {
    return `frame length ${length} exceeds the limit of ${limit} bytes`;
  }
  return {
    kind: kind as FrameKind,
    tag: view.getUint32(8, true),
    seq: view.getUint32(12, true),
    length,
    sender: view.getUint32(24, true),
    stamp: op === 0 && opSeq === 0 ? NO_STAMP : { op, seq: opSeq },
  };
}

/** The hello payload: rank, world size, token (UTF-8). */
export function encodeHello(rank: number, size: number, token: string): Uint8Array {
  const tokenBytes = new TextEncoder().encode(token);
  const payload = new Uint8Array(8 + tokenBytes.byteLength);
  const view = new DataView(payload.buffer);
  view.setUint32(0, rank, true);
  view.setUint32(4, size, true);
  payload.set(tokenBytes, 8);
  return payload;
}

export function decodeHello(
  payload: Uint8Array,
): { rank: number; size: number; token: Uint8Array } | string {
  if (payload.byteLength < 8) return 'hello payload too short';
  const view = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
  return {
    rank: view.getUint32(0, true),
    size: view.getUint32(4, true),
    token: payload.subarray(8),
  };
}

/** A whole frame (header and payload) in one new buffer, for control frames. */
export function encodeFrame(header: Omit<FrameHeader, 'length'>, payload: Uint8Array): Uint8Array {
  const frame = new Uint8Array(HEADER_BYTES + payload.byteLength);
  writeHeader(frame, { ...header, length: payload.byteLength });
  frame.set(payload, HEADER_BYTES);
  return frame;
}
