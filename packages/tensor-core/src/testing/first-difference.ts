/**
 * The first index where two arrays of bits differ, or -1: for tests comparing results bit for bit
 * at sizes where vitest's diff of a failing `toEqual` takes minutes. Arrays of different lengths
 * differ at the shorter one's length.
 */
export function firstDifference(a: Uint32Array, b: Uint32Array): number {
  if (a.length !== b.length) return Math.min(a.length, b.length);
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return i;
  return -1;
}
