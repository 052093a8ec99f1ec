import { ArgumentError, DTypeError, ShapeError } from '@webshard/tensor-core';
import { shardRange } from '../shard.js';

/**
 * The checks a group's calls make before anything runs, shared by every group that takes the
 * calls (`ProcessGroup`, and `WorkerGroup`, whose rank's thread checks what its worker will run):
 * one place for the messages, so both paths throw the same errors.
 */

/** What a check needs of an operand: its dtype and element count. */
interface Counted {
  readonly dtype: string;
  readonly count: number;
}

/** Throws unless `shard` is rank `rank`'s shard of `full` over `size` ranks (`shardRange`). */
export function checkShard(
  op: string,
  rank: number,
  size: number,
  shard: Counted,
  full: Counted,
  which: 'input' | 'output',
): void {
  if (shard.dtype !== full.dtype) {
    throw new DTypeError(op, [shard.dtype, full.dtype], 'input and output dtypes differ');
  }
  const expected = shardRange(full.count, size, rank).count;
  if (shard.count !== expected) {
    throw new ShapeError(
      op,
      [[shard.count], [full.count]],
      `rank ${rank}: expected ${which} of ${expected} elements (shard ${rank} of ${full.count} over ${size} ranks), got ${shard.count}`,
    );
  }
}

/** Throws unless `peer` is a rank of a group of `size` (and not `rank` itself unless allowed). */
export function checkPeer(
  op: string,
  rank: number,
  size: number,
  peer: number,
  selfAllowed: boolean,
): void {
  if (!Number.isInteger(peer) || peer < 0 || peer >= size || (!selfAllowed && peer === rank)) {
    throw new ArgumentError(
      op,
      `rank ${rank}: ${peer} is not a ${selfAllowed ? '' : 'peer '}rank of a group of ${size}`,
    );
  }
}

/** Throws unless `ranks` are ascending distinct ranks of a group of `size`, at least one. */
export function checkGroupRanks(ranks: readonly number[], size: number): void {
  for (let i = 0; i < ranks.length; i++) {
    const r = ranks[i]!;
    if (!Number.isInteger(r) || r < 0 || r >= size || (i > 0 && r <= ranks[i - 1]!)) {
      throw new ArgumentError(
        'newGroup',
        `ranks must be ascending distinct ranks of a group of ${size}, got [${ranks.join(', ')}]`,
      );
    }
  }
  if (ranks.length === 0) throw new ArgumentError('newGroup', 'a group needs at least one rank');
}
