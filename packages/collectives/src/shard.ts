/** One rank's part of a flat buffer: elements `[start, start + count)`. */
export interface ShardRange {
  readonly start: number;
  readonly count: number;
}

/**
 * The shard of rank `rank` when `count` elements are split over `size` ranks, as PyTorch FSDP's
 * flat parameter splits them: every shard has `ceil(count / size)` slots, the flat buffer is padded
 * at the end to `size` full shards, and a rank's shard is its slots that fall inside the real
 * elements. So the first ranks get full shards and the last ones a shorter or an empty shard: 10
 * elements over 4 ranks are 3, 3, 3 and 1; 2 elements over 4 ranks are 1, 1, 0, 0.
 */
export function shardRange(count: number, size: number, rank: number): ShardRange {
  const per = Math.ceil(count / size);
  const start = Math.min(count, rank * per);
  const end = Math.min(count, start + per);
  return { start, count: end - start };
}
