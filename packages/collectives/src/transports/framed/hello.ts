import type { AbortReason } from '../../errors.js';
import {
  decodeHello,
  encodeFrame,
  encodeHello,
  FrameKind,
  HEADER_BYTES,
  readHeader,
} from './frame.js';

/**
 * The hello a rank says first on a connection it opened (and a `ws` listener answers with, token
 * left empty): rank, world size, join token ([Note: network frames]).
 */
export function helloFrame(rank: number, size: number, token: string): Uint8Array {
  return encodeFrame(
    { kind: FrameKind.hello, tag: 0, seq: 0, sender: rank },
    encodeHello(rank, size, token),
  );
}

/** A control frame with no payload or a JSON one (bye, abort). */
export function controlFrame(kind: FrameKind, sender: number, payload?: string): Uint8Array {
  const bytes = payload === undefined ? new Uint8Array(0) : new TextEncoder().encode(payload);
  return encodeFrame({ kind, tag: 0, seq: 0, sender }, bytes);
}

/**
 * The sender's rank and token when `bytes` is exactly one well-formed hello from a rank of a
 * world of `size` (the token is not checked here); else undefined.
 */
export function parseHello(
  bytes: Uint8Array | string,
  size: number,
): { rank: number; token: Uint8Array } | undefined {
  if (typeof bytes === 'string') return undefined;
  const header = readHeader(bytes, 0);
  if (typeof header === 'string' || header.kind !== FrameKind.hello) return undefined;
  if (bytes.byteLength !== HEADER_BYTES + header.length) return undefined;
  const hello = decodeHello(bytes.subarray(HEADER_BYTES));
  if (typeof hello === 'string' || hello.size !== size || hello.rank !== header.sender) {
    return undefined;
  }
  return hello;
}

const REASON_KINDS = ['timeout', 'mismatch', 'peer-lost', 'user', 'error'];

/** `value` as an abort reason, or null when it is not one (a peer's frame, the store's value). */
export function validReason(value: unknown): AbortReason | null {
  const r = value as Partial<AbortReason> | null;
  if (
    typeof r !== 'object' ||
    r === null ||
    !REASON_KINDS.includes(r.kind as string) ||
    !Number.isInteger(r.origin) ||
    typeof r.message !== 'string'
  ) {
    return null;
  }
  return r as AbortReason;
}
