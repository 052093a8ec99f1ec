import type { ProcessGroup } from '@webshard/collectives';
import { clipGradNorm, GradScaler, type GradScalerOptions } from '@webshard/tensor-core';
import { FsdpConfigError } from './errors.js';
import type { FullyShardedDataParallel } from './fully-sharded.js';

/**
 * Combine every rank's partial norm: the sum of |g|^p, or for the max norm the max. Each rank's
 * value is gathered (f32 split into a high and a low part, so no precision is lost to the f32
 * transport) and combined in rank order in double precision, so every rank gets the same number.
 */
export async function reducePartialNorm(
  group: ProcessGroup,
  local: number,
  mode: 'sum' | 'max',
): Promise<number> {
  if (group.size === 1) return local;
  const hi = Math.fround(local);
  const mine = new Float32Array([hi, Math.fround(local - hi)]);
  const all = new Float32Array(2 * group.size);
  await group.allGather(mine, all).wait();
  let total = mode === 'sum' ? 0 : Number.NEGATIVE_INFINITY;
  for (let r = 0; r < group.size; r++) {
    const v = all[2 * r]! + all[2 * r + 1]!;
    total = mode === 'sum' ? total + v : Math.max(total, Number.isNaN(v) ? Number.NaN : v);
    if (Number.isNaN(v)) total = Number.NaN;
  }
  return total;
}

/**
 * Clip the gradients of every shard under `root` so that their global p-norm is at most `maxNorm`
 * (fairscale's `clip_grad_norm_`): each rank's partial norm over its shards is combined across the
 * group, so every rank scales by the same factor and the result equals clipping the full,
 * unsharded gradients. Padding elements of the shards have zero gradient and do not count.
 * Returns the total norm before clipping. Call it on the root, on every rank, after backward.
 */
export function clipShardedGradNorm(
  root: FullyShardedDataParallel,
  maxNorm: number,
  normType = 2,
): Promise<number> {
  root.assertState('clipGradNorm', ['IDLE']);
  const group = root.options.group;
  const mode = normType === Number.POSITIVE_INFINITY ? 'max' : 'sum';
  return clipGradNorm(root.parameters(), maxNorm, {
    normType,
    reduceNorm: (local) => reducePartialNorm(group, local, mode),
  });
}

/**
 * A `GradScaler` for sharded gradients (fairscale's `ShardedGradScaler`): a rank sees inf or NaN
 * only in its own shards, so the inf check is all-reduced (max) over the group and every rank skips
 * or takes the step, and grows or backs off its scale, together.
 */
export class ShardedGradScaler extends GradScaler {
  constructor(
    readonly group: ProcessGroup,
    options: Omit<GradScalerOptions, 'reduceFoundInf'> = {},
  ) {
    if (group === undefined || group === null) {
      throw new FsdpConfigError('ShardedGradScaler', 'a process group is needed');
    }
    super({
      ...options,
      reduceFoundInf: (local) => reducePartialNorm(group, local, 'max'),
    });
  }
}
