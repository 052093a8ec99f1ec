import { FrameKind, HEADER_BYTES, readHeader, writeHeader } from '../framed/frame.js';

/**
 * Helpers of the `ws` relay ([Note: ws connections]): two ranks that cannot listen (browsers)
 * talk through the lowest listening rank, a `relay` frame carrying the whole inner frame to it and
 * a `relayed` frame carrying it on. Browser-safe.
 */

/** A relay header announcing `length` bytes of a frame for (`relay`) or from (`relayed`) `rank`. */
export function relayHeader(
  kind: FrameKind,
  rank: number,
  length: number,
  sender: number,
): Uint8Array {
  const header = new Uint8Array(HEADER_BYTES);
  writeHeader(header, { kind, tag: rank, seq: 0, length, sender });
  return header;
}

/** Where a peer's place in the relay is: connected directly, or reached through `via`. */
interface RelayPeer {
  readonly via: RelayPeer | null;
}

/**
 * Whether `from` may send a frame of `kind` naming `other` (rank `tag` of the header): a `relay`
 * asks this rank to pass a frame on to a rank both reach directly; a `relayed` frame comes from
 * the relay on behalf of a rank this one reaches only through it.
 */
export function relayAllowed(
  kind: FrameKind,
  from: RelayPeer,
  other: RelayPeer | null | undefined,
): boolean {
  if (from.via !== null || other === undefined || other === null || other === from) return false;
  return kind === FrameKind.relay ? other.via === null : other.via === from;
}

/** Why a relayed frame's bytes are not one whole frame, or null when they are. */
export function relayedFrameProblem(frame: Uint8Array, maxMessageBytes: number): string | null {
  if (frame.byteLength < HEADER_BYTES) {
    return `relayed frame of ${frame.byteLength} bytes has no header`;
  }
  const parsed = readHeader(frame.subarray(0, HEADER_BYTES), maxMessageBytes);
  if (typeof parsed !== 'string' && parsed.length !== frame.byteLength - HEADER_BYTES) {
    return `relayed frame announces ${parsed.length} bytes but carries ${frame.byteLength - HEADER_BYTES}`;
  }
  return null;
}
