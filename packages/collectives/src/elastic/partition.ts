import { ArgumentError } from '@webshard/tensor-core';
import type { ShardRange } from '../shard.js';

/** A member's part of a global batch or data set, and its share of the whole. */
export interface ElasticShare extends ShardRange {
  /** `count / total`: weigh this rank's mean loss by it when the shares are unequal. */
  readonly weight: number;
}

/**
 * The part of `total` items (the samples of one global batch, or of a data set) that rank `rank`
 * of a world of `worldSize` takes: contiguous, in rank order, sizes differing by at most one
 * (`floor(r * total / n)` to `floor((r + 1) * total / n)`). It depends only on the membership, so
 * after every change each member recomputes its part and together they still cover every item
 * exactly once: a global batch that stays the same size gives the same gradient at 3 members and
 * at 2 (up to the order of the sum).
 */
export function elasticShare(total: number, worldSize: number, rank: number): ElasticShare {
  if (!Number.isSafeInteger(total) || total < 0) {
    throw new ArgumentError('elasticShare', `total must be an integer >= 0, got ${total}`);
  }
  if (!Number.isSafeInteger(worldSize) || worldSize < 1) {
    throw new ArgumentError('elasticShare', `worldSize must be an integer >= 1, got ${worldSize}`);
  }
  if (!Number.isSafeInteger(rank) || rank < 0 || rank >= worldSize) {
    throw new ArgumentError('elasticShare', `rank ${rank} is outside [0, ${worldSize})`);
  }
  const start = Math.floor((rank * total) / worldSize);
  const end = Math.floor(((rank + 1) * total) / worldSize);
  return { start, count: end - start, weight: total === 0 ? 0 : (end - start) / total };
}
