import type { OpOptions, ProcessGroup } from './process-group.js';

/**
 * [Note: scalars across ranks]
 * A number a rank holds on the host (a loss, a partial norm, a byte count, a time) travels as the
 * two 32-bit words of its float64 in an i32 all-gather: every rank receives every other rank's
 * value bit for bit (infinities, NaN and -0 included), and combines them itself, in rank order
 * and in double precision, so every rank gets the same number as every other, and the same as a
 * single process adding the same values in the same order. An all-reduce of an f32 would round
 * each value to 24 bits and add in whatever order the algorithm picks. Ranks of one world share an
 * endianness (every platform webshard runs on is little-endian), so the words need no swapping.
 */

/** Every rank's `value`, by rank, exactly as each rank passed it (one i32 all-gather). */
export async function gatherScalar(
  group: ProcessGroup,
  value: number,
  options: OpOptions = {},
): Promise<number[]> {
  if (group.size === 1) return [value];
  const mine = new Int32Array(new Float64Array([value]).buffer);
  const all = new Int32Array(2 * group.size);
  await group.allGather(mine, all, options).wait();
  return Array.from(new Float64Array(all.buffer));
}

/**
 * Every rank's `values` (the same count on every rank), by rank, exactly as each rank passed them:
 * several numbers in one i32 all-gather, so one latency of the group where `gatherScalar` for each
 * would take one apiece (the trainer's per-rank fields of a step line on a 40 ms link).
 */
export async function gatherScalars(
  group: ProcessGroup,
  values: readonly number[],
  options: OpOptions = {},
): Promise<number[][]> {
  if (group.size === 1) return [[...values]];
  const n = values.length;
  const mine = new Int32Array(new Float64Array(values).buffer);
  const all = new Int32Array(2 * n * group.size);
  await group.allGather(mine, all, options).wait();
  const flat = new Float64Array(all.buffer);
  return Array.from({ length: group.size }, (_, r) =>
    Array.from(flat.subarray(r * n, (r + 1) * n)),
  );
}

/**
 * The mean of `value` over the ranks of `group`: every rank's value summed in rank order in double
 * precision, divided by the group's size ([Note: scalars across ranks]). Every rank gets the same
 * number, bit for bit; a NaN or an infinity on any rank reaches every rank. Each rank must call it,
 * as any collective.
 */
export async function averageScalar(
  group: ProcessGroup,
  value: number,
  options: OpOptions = {},
): Promise<number> {
  const values = await gatherScalar(group, value, options);
  let total = 0;
  for (const v of values) total += v;
  return total / group.size;
}
