// Which tensors each fragment of a streamed DiLoCo holds, and after which inner step each
// fragment syncs ([Note: streamed fragments] in streamed-fragments.ts).

/**
 * Tensor indices of each of `count` fragments, for tensors of `sizes` elements: each tensor in
 * order to the fragment with the fewest elements so far, ties to the lowest ([Note: streamed
 * fragments]).
 */
export function dealFragments(sizes: readonly number[], count: number): number[][] {
  const fragments = Array.from({ length: count }, () => [] as number[]);
  const filled = new Array<number>(count).fill(0);
  for (const [i, size] of sizes.entries()) {
    let p = 0;
    for (let q = 1; q < count; q++) if (filled[q]! < filled[p]!) p = q;
    fragments[p]!.push(i);
    filled[p]! += size;
  }
  return fragments;
}

/** The fragment whose sync starts after inner step `step` (from 1), or null ([Note: streamed fragments]). */
export function fragmentDue(step: number, innerSteps: number, count: number): number | null {
  const phase = step % innerSteps;
  for (let p = 0; p < count; p++) if (Math.floor((p * innerSteps) / count) === phase) return p;
  return null;
}
