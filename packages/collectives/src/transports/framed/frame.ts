/**
 * The frame header the `tcp` and `ws` transports share. Browser-safe: no Node imports.
 *
 * [Note: network frames]
 * Every message is a 32-byte little-endian header, then `length` payload bytes:
 *
 *   0  magic u32 (`WSHD`)        4  version u8, kind u8, reserved u16 (0)
 *   8  tag u32 (the group id)    12 seq u32 (n-th message from this sender on this tag)
 *   16 length u32 (low)          20 length u32 (high, < 2^21)
 *   24 sender rank u32           28 check u32 (FNV-1a of bytes 0..27)
 *
 * The transport only sees groups as tags; the op-level fingerprint (op, seq, dtype, count) is the
 * process group's and travels as its own messages. The per-tag `seq` catches lost, duplicated or
 * reordered frames, and `check` catches garbage that happens to start with the magic. A receiver
 * validates every field before it trusts the length, and a frame that fails is a protocol
 * violation naming the peer: it aborts the transport, it never throws into the socket's callback.
 * Over TCP the payload follows the header on the stream; over WebSocket the header is one binary
 * message and a non-empty payload the next one. `relay`/`relayed` frames (ws only) carry a whole
 * inner frame as their payload, for ranks that reach each other through a third ([Note: ws
 * connections]); over TCP they are violations.
 */

export const FRAME_MAGIC = 0x44485357;
export const FRAME_VERSION = 1;
export const HEADER_BYTES = 32;

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
}

function fnv1a(bytes: Uint8Array, end: number): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < end; i++) {
    hash ^= bytes[i]!;
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}

/** Writes a header into `target` (32 bytes at `offset`). */
export function writeHeader(target: Uint8Array, header: FrameHeader, offset = 0): void {
  const view = new DataView(target.buffer, target.byteOffset + offset, HEADER_BYTES);
  view.setUint32(0, FRAME_MAGIC, true);
  view.setUint8(4, FRAME_VERSION);
  view.setUint8(5, header.kind);
  view.setUint16(6, 0, true);
  view.setUint32(8, header.tag, true);
  view.setUint32(12, header.seq, true);
  view.setUint32(16, header.length % 0x1_0000_0000, true);
  view.setUint32(20, Math.floor(header.length / 0x1_0000_0000), true);
  view.setUint32(24, header.sender, true);
  const bytes = target.subarray(offset, offset + HEADER_BYTES);
  view.setUint32(28, fnv1a(bytes, 28), true);
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
  const check = view.getUint32(28, true);
  if (check !== fnv1a(source.subarray(offset, offset + HEADER_BYTES), 28)) {
    return 'header check word does not match';
  }
  const kind = view.getUint8(5);
  if (kind < FrameKind.data || kind > FrameKind.relayed) return `unknown frame kind ${kind}`;
  if (view.getUint16(6, true) !== 0) return 'reserved header bits are set';
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
