import type { ProcessGroup } from '@webshard/collectives';

/**
 * Every rank's `value` (a byte count, a time), by rank. Sent as two f32 (the value and what f32
 * rounding left of it), so integers up to 2^48 arrive exact.
 */
export async function gatherPerRank(group: ProcessGroup, value: number): Promise<number[]> {
  const hi = Math.fround(value);
  const mine = new Float32Array([hi, Math.fround(value - hi)]);
  const all = new Float32Array(2 * group.size);
  await group.allGather(mine, all).wait();
  return Array.from({ length: group.size }, (_, r) => all[2 * r]! + all[2 * r + 1]!);
}
