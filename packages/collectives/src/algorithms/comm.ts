/**
 * What an algorithm sees of the group for one op: its rank and size, and ordered point-to-point
 * messages to group ranks on the group's tag. Every promise it returns is already marked handled, so
 * an algorithm may leave sends in flight and fail on the first receive that rejects.
 */
export interface Comm {
  readonly rank: number;
  readonly size: number;
  send(peer: number, data: Uint8Array): Promise<void>;
  recv(peer: number, dst: Uint8Array): Promise<void>;
  /**
   * Optional: the op will receive at most `bytes` in `messages` messages from `peer` ([Note: an
   * op's own bytes are expected] in transports/expected-bytes.ts); returns what ends it.
   */
  expect?(peer: number, bytes: number, messages: number): () => void;
}

export function mod(value: number, size: number): number {
  return ((value % size) + size) % size;
}

/** `[offset, length)` pieces of a range, `segment` long except the last. */
export function segments(start: number, length: number, segment: number): [number, number][] {
  const out: [number, number][] = [];
  for (let at = 0; at < length; at += segment)
    out.push([start + at, Math.min(segment, length - at)]);
  return out;
}
