import type { ProcessGroup } from '@webshard/collectives';

/**
 * Every rank's `value` (a byte count, a time), by rank. Sent as two f32 (the value and what f32
 * rounding left of it), so integers up to 2^48 arrive exact.
 */
export async function gatherPerRank(group: ProcessGroup, value: number): Promise<number[]> {
  return (await gatherValuesPerRank(group, [value]))[0]!;
}

/**
 * Every rank's `values` in one all-gather: for each value, its numbers by rank (as
 * `gatherPerRank`, two f32 a value). Every rank passes as many values.
 */
export async function gatherValuesPerRank(
  group: ProcessGroup,
  values: readonly number[],
): Promise<number[][]> {
  const n = values.length;
  const mine = new Float32Array(2 * n);
  values.forEach((value, i) => {
    const hi = Math.fround(value);
    mine[2 * i] = hi;
    mine[2 * i + 1] = Math.fround(value - hi);
  });
  const all = new Float32Array(2 * n * group.size);
  await group.allGather(mine, all).wait();
  return values.map((_, i) =>
    Array.from({ length: group.size }, (_, r) => all[2 * (r * n + i)]! + all[2 * (r * n + i) + 1]!),
  );
}
