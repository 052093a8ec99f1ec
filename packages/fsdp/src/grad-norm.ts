import { gatherScalar, type ProcessGroup } from '@webshard/collectives';
import {
  type Backend,
  clipGradNorm,
  GradScaler,
  type GradScalerOptions,
  partialNorm,
  Tensor,
} from '@webshard/tensor-core';
import { FsdpConfigError } from './errors.js';
import type { FullyShardedDataParallel } from './fully-sharded.js';
import type { SsdShards } from './ssd/ssd-shards.js';

/**
 * Combine every rank's partial norm: the sum of |g|^p, or for the max norm the max. Each rank's
 * value reaches every rank exactly (collectives' `gatherScalar`, [Note: scalars across ranks]) and
 * is combined in rank order in double precision, so every rank gets the same number, and an
 * infinite partial norm gives an infinite total, as in one process.
 */
export async function reducePartialNorm(
  group: ProcessGroup,
  local: number,
  mode: 'sum' | 'max',
): Promise<number> {
  if (group.size === 1) return local;
  const values = await gatherScalar(group, local);
  if (mode === 'max') return Math.max(...values);
  let total = 0;
  for (const v of values) total += v;
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
  const stored = root.units().flatMap((u) => (u.ssdShards === null ? [] : [u.ssdShards]));
  if (!stored.some((s) => s.offloadsGradients)) {
    return clipGradNorm(root.parameters(), maxNorm, {
      normType,
      reduceNorm: (local) => reducePartialNorm(group, local, mode),
    });
  }
  return clipWithStoredGrads(root, maxNorm, normType, stored);
}

/**
 * `clipShardedGradNorm` where gradients live in a store ([Note: gradients in a store]): each
 * gradient's partial norm is `partialNorm`'s, a stored one read in for it and freed again, and the
 * partials are reduced as `clipGradNorm` reduces them, so the total is the in-memory one bit for
 * bit; the clip factor of stored gradients is applied when they are read back.
 */
async function clipWithStoredGrads(
  root: FullyShardedDataParallel,
  maxNorm: number,
  normType: number,
  stored: SsdShards[],
): Promise<number> {
  // The same argument checks (and errors) as clipGradNorm, before anything is read.
  await clipGradNorm([], maxNorm, { normType });
  const inf = normType === Number.POSITIVE_INFINITY;
  const inMemory: Tensor[] = [];
  const partials: number[] = [];
  let backend: Backend | null = null;
  for (const p of root.parameters()) {
    const g = p.grad;
    if (g === null) continue;
    backend ??= g.backend;
    if (!g.isFreed) {
      inMemory.push(g);
      partials.push(await partialNorm([g], normType));
      continue;
    }
    let read: Tensor | null = null;
    for (const shards of stored) read ??= await shards.storedGradOf(p);
    // Not in a store either: partialNorm names the freed gradient.
    const grad = read ?? g;
    try {
      partials.push(await partialNorm([grad], normType));
    } finally {
      read?.free();
    }
  }
  const local = backend === null ? 0 : await reducePartials(backend, partials, inf);
  const partial = await reducePartialNorm(root.options.group, local, inf ? 'max' : 'sum');
  const total = inf ? partial : partial ** (1 / normType);
  const coef = Math.fround(maxNorm / (Math.fround(total) + 1e-6));
  if (!(coef >= 1)) {
    // In place (`g.mul_(coef)`), as tensor-core's clipGradNorm scales.
    for (const g of inMemory) {
      const kernel = g.kernel('clipGradNorm');
      g.backend.binary('mul', kernel, coef, kernel);
    }
    for (const shards of stored) shards.scaleStoredGradients(coef);
  }
  return total;
}

/** Sum (or max) the per-gradient partial norms as `partialNorm` reduces its per-tensor slots. */
async function reducePartials(backend: Backend, partials: number[], inf: boolean): Promise<number> {
  const slots = Tensor.empty(backend, [partials.length], 'f32');
  const total = Tensor.empty(backend, [], 'f32');
  try {
    slots.write(Float32Array.from(partials));
    backend.reduce(
      inf ? 'max' : 'sum',
      slots.kernel('clipGradNorm'),
      0,
      total.kernel('clipGradNorm'),
    );
    return await total.item();
  } finally {
    slots.free();
    total.free();
  }
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
