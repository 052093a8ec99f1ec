import {
  type Backend,
  createCpuBackend,
  keep,
  type Optimizer,
  type OptimizerParamState,
  type OptimizerStateDict,
  Tensor,
} from '@webshard/tensor-core';
import type { FullyShardedDataParallel } from './fully-sharded.js';
import { flatParamsOf, type ShardedLayout, shardedLayout } from './layout.js';
import { consolidateFlat, FsdpStateDictError } from './state-dict.js';

/**
 * An optimizer's state in full, keyed by the original parameters' names (a tied parameter under
 * its first name): per parameter its numbers (`step`) and full-shaped tensors (`exp_avg`,
 * `exp_avg_sq` for Adam), and the groups' hyperparameters with their parameters' names.
 */
export interface FullOptimStateDict {
  state: Record<string, OptimizerParamState>;
  param_groups: (Record<string, unknown> & { params: string[] })[];
}

type AnyOptimizer = Optimizer<object, object>;

/** For each optimizer parameter index, its flat parameter's layout (or null if not a shard). */
function shardIndex(
  root: FullyShardedDataParallel,
  layout: ShardedLayout,
  optimizer: AnyOptimizer,
) {
  const flats = flatParamsOf(root);
  return optimizer.params.map((p) => {
    const i = flats.findIndex((f) => f.flat.shard === p);
    if (i < 0) {
      throw new FsdpStateDictError(
        'optimizer state',
        `the optimizer steps ${p.name ?? String(p)}, which is not a shard of this model`,
      );
    }
    return { flat: flats[i]!.flat, layout: layout.flatParams[i]! };
  });
}

/**
 * The full optimizer state (fairscale's `gather_full_optim_state_dict`): each shard-shaped state
 * tensor is gathered and cut into the original parameters' shapes. Every rank must call it; with
 * `rank0Only` (default true, as fairscale) the others get null.
 */
export async function gatherFullOptimStateDict(
  root: FullyShardedDataParallel,
  optimizer: AnyOptimizer,
  options: { rank0Only?: boolean; backend?: Backend } = {},
): Promise<FullOptimStateDict | null> {
  const group = root.options.group;
  const holds = !(options.rank0Only ?? true) || group.rank === 0;
  const backend = options.backend ?? createCpuBackend();
  const layout = shardedLayout(root);
  const index = shardIndex(root, layout, optimizer);
  const local = optimizer.stateDict();
  const state: Record<string, OptimizerParamState> = {};
  for (const [i, { flat, layout: fl }] of index.entries()) {
    const own = local.state[i];
    // Every rank has state for the same parameters (they stepped together), so the gathers match.
    if (own === undefined) continue;
    const perEntry = fl.entries.map(() => ({}) as OptimizerParamState);
    for (const [key, value] of Object.entries(own)) {
      if (!(value instanceof Tensor) || value.size !== flat.shardNumel) {
        for (const s of perEntry) s[key] = value instanceof Tensor ? null : value;
        continue;
      }
      const full = keep(Tensor.empty(value.backend, [fl.paddedNumel], 'f32'));
      await group.allGather(value, full).wait();
      const values = (await full.read()) as Float32Array;
      full.free();
      if (!holds) continue;
      fl.entries.forEach((e, j) => {
        const t = keep(Tensor.empty(backend, e.shape, 'f32'));
        t.write(values.subarray(e.offset, e.offset + e.numel));
        perEntry[j]![key] = t;
      });
    }
    if (holds) {
      fl.entries.forEach((e, j) => {
        state[e.names[0]!] = perEntry[j]!;
      });
    }
  }
  if (!holds) return null;
  const names = index.map(({ layout: fl }) => fl.entries.map((e) => e.names[0]!));
  return {
    state,
    param_groups: local.param_groups.map((g) => ({
      ...g,
      params: g.params.flatMap((i) => names[i]!),
    })),
  };
}

/**
 * Load a full optimizer state (from `gatherFullOptimStateDict` at any world size) into this rank's
 * optimizer over the shards (fairscale's `get_shard_from_optim_state_dict` followed by
 * `load_state_dict`): each state tensor is laid out flat like its parameters and this rank's slice
 * kept. Everything is checked before the optimizer is touched.
 */
export async function loadFullOptimStateDict(
  root: FullyShardedDataParallel,
  optimizer: AnyOptimizer,
  full: FullOptimStateDict,
): Promise<void> {
  const op = 'loadFullOptimStateDict';
  const layout = shardedLayout(root);
  const index = shardIndex(root, layout, optimizer);
  const own = optimizer.stateDict();
  if (full.param_groups.length !== own.param_groups.length) {
    throw new FsdpStateDictError(
      op,
      `the state has ${full.param_groups.length} parameter groups, the optimizer ${own.param_groups.length}`,
    );
  }
  const rank = root.options.group.rank;
  const state: OptimizerStateDict['state'] = {};
  const shardBackend = createCpuBackend();
  for (const [i, { flat, layout: fl }] of index.entries()) {
    const entries = fl.entries.map((e) => full.state[e.names[0]!]);
    if (entries.every((s) => s === undefined)) continue;
    if (entries.some((s) => s === undefined)) {
      throw new FsdpStateDictError(op, `state for some but not all parameters of ${fl.key}`);
    }
    const out: OptimizerParamState = {};
    for (const [key, value] of Object.entries(entries[0]!)) {
      if (!(value instanceof Tensor)) {
        out[key] = value;
        continue;
      }
      const values = new Float32Array(fl.paddedNumel);
      for (const [j, e] of fl.entries.entries()) {
        const t = entries[j]![key];
        if (!(t instanceof Tensor) || t.size !== e.numel) {
          throw new FsdpStateDictError(
            op,
            `'${key}' of ${e.names[0]} is missing or has the wrong size (expected ${e.numel})`,
          );
        }
        values.set((await t.read()) as Float32Array, e.offset);
      }
      const slice = keep(Tensor.empty(shardBackend, [flat.shardNumel], 'f32'));
      slice.write(values.subarray(rank * flat.shardNumel, (rank + 1) * flat.shardNumel));
      out[key] = slice;
    }
    state[i] = out;
  }
  const groups = own.param_groups.map((g, i) => ({ ...full.param_groups[i]!, params: g.params }));
  await optimizer.loadStateDict({ state, param_groups: groups });
  for (const s of Object.values(state)) {
    for (const v of Object.values(s)) if (v instanceof Tensor) v.free();
  }
}

/** Consolidate a flat state tensor from per-rank shards (for offline tools). */
export { consolidateFlat };
