import type { Bits } from './reference.js';

/** What a rank reports when an output differs from the reference. */
export interface StressMismatch {
  readonly seed: number;
  /** The op's index in the program. */
  readonly op: number;
  readonly kind: string;
  /** World rank, and the rank in the op's group. */
  readonly rank: number;
  readonly groupRank: number;
  /** The first differing byte of the output, and the element it lies in. */
  readonly byte: number;
  readonly element: number;
  /** That element's bits, in hex. */
  readonly expected: string;
  readonly actual: string;
  /** Differing elements in all (counted up to the end of the output). */
  readonly differing: number;
  /** The op as drawn: dtype, count, reduce op, group, placements. */
  readonly detail: string;
}

const CHUNK = 1 << 16;

/** The first difference of `actual` from the reference, or null: its element and byte. */
export function firstDifference(
  actual: Bits,
  expected: (start: number, out: Bits) => void,
): { element: number; byte: number; expected: number; actual: number; differing: number } | null {
  const chunk =
    actual instanceof Uint16Array
      ? new Uint16Array(Math.min(CHUNK, actual.length))
      : new Uint32Array(Math.min(CHUNK, actual.length));
  let first: { element: number; byte: number; expected: number; actual: number } | null = null;
  let differing = 0;
  for (let start = 0; start < actual.length; start += CHUNK) {
    const length = Math.min(CHUNK, actual.length - start);
    const want = chunk.subarray(0, length);
    expected(start, want);
    for (let i = 0; i < length; i++) {
      const got = actual[start + i]!;
      if (got === want[i]) continue;
      differing++;
      if (first !== null) continue;
      const bytes = actual.BYTES_PER_ELEMENT;
      let b = 0;
      while (b < bytes && ((got >>> (8 * b)) & 0xff) === ((want[i]! >>> (8 * b)) & 0xff)) b++;
      first = {
        element: start + i,
        byte: (start + i) * bytes + b,
        expected: want[i]!,
        actual: got,
      };
    }
  }
  return first === null ? null : { ...first, differing };
}

/** Bits as hex of their width. */
export function hex(bits: number, width: number): string {
  return `0x${(bits >>> 0).toString(16).padStart(width * 2, '0')}`;
}

/** One line that says everything needed to replay and locate a mismatch. */
export function describeMismatch(m: StressMismatch, transport: string): string {
  return (
    `stress mismatch: seed ${m.seed}, op #${m.op} (${m.kind} ${m.detail}), rank ${m.rank} ` +
    `(group rank ${m.groupRank}) on ${transport}: first differing byte ${m.byte} ` +
    `(element ${m.element}: expected ${m.expected}, got ${m.actual}; ${m.differing} elements differ)`
  );
}
