/**
 * Facts about a strided window of a storage (`offset + sum(i_d * strides[d])`) that the kernel
 * calls and the ops above them both ask: how far it reaches, and whether it names any element
 * twice.
 */

/** Elements from the window's first to its last, inclusive (0 for an empty window). */
export function stridedExtent(shape: readonly number[], strides: readonly number[]): number {
  let last = 0;
  for (let d = 0; d < shape.length; d++) {
    if (shape[d] === 0) return 0;
    last += (shape[d]! - 1) * strides[d]!;
  }
  return last + 1;
}

/**
 * Whether no two of the window's elements coincide: with its dims of more than one element sorted
 * by stride, each stride passes everything the smaller ones reach.
 */
export function distinctElements(shape: readonly number[], strides: readonly number[]): boolean {
  const dims = shape
    .map((d, i) => [d, strides[i]!] as const)
    .filter(([d]) => d > 1)
    .sort((x, y) => x[1] - y[1]);
  let reach = 1;
  for (const [d, s] of dims) {
    if (s < reach) return false;
    reach = s * (d - 1) + reach;
  }
  return true;
}
