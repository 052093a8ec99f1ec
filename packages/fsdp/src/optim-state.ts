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
import { FsdpConfigError } from './errors.js';
import { withShardsInMemory } from './ssd/ssd-offload.js';
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

/** Options of `gatherFullOptimStateDict`. */
export interface GatherOptimOptions {
  /**
   * The rank that gets the state (fairscale's `recipient_rank`); the others get null. Default 0.
   */
  recipientRank?: number;
  /** False: every rank gets the state. Default true (only `recipientRank`). */
  rank0Only?: boolean;
  /** Where the returned tensors live. Default: a CPU backend of their own. */
  backend?: Backend;
}

/**
 * The full optimizer state (fairscale's `gather_full_optim_state_dict`): each shard-shaped state
 * tensor is gathered and cut into the original parameters' shapes. Every rank must call it; only
 * `recipientRank` (default 0) gets it, the others null, unless `rank0Only: false`. A recipient
 * outside the group is a `FsdpConfigError`, before any collective. Under `ssdOffload` the state
 * is read in from the store for it and freed again ([Note: optimizer state in a store]).
 */
export async function gatherFullOptimStateDict(
  root: FullyShardedDataParallel,
  optimizer: AnyOptimizer,
  options: GatherOptimOptions = {},
): Promise<FullOptimStateDict | null> {
  return withShardsInMemory(root, optimizer, async () => ({
    value: await gatherFull(root, optimizer, options),
    changed: false,
  }));
}

async function gatherFull(
  root: FullyShardedDataParallel,
  optimizer: AnyOptimizer,
  options: GatherOptimOptions,
): Promise<FullOptimStateDict | null> {
  const group = root.options.group;
  const recipient = options.recipientRank ?? 0;
  if (!Number.isInteger(recipient) || recipient < 0 || recipient >= group.size) {
    throw new FsdpConfigError(
      'gatherFullOptimStateDict',
      `recipientRank must be an integer in [0, ${group.size}), got ${recipient} (rank ${group.rank})`,
    );
  }
  const holds = !(options.rank0Only ?? true) || group.rank === recipient;
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
 * This rank's shard of a full optimizer state (from `gatherFullOptimStateDict` at any world size),
 * in memory, as the optimizer over the shards loads it (fairscale's
 * `get_shard_from_optim_state_dict`): each state tensor laid out flat like its parameters and this
 * rank's slice kept, on a CPU backend of its own (the caller frees the tensors, or passes the dict
 * to `optimizer.loadStateDict`, which copies). Everything is checked before anything is made; no
 * collective.
 */
export async function getShardFromOptimStateDict(
  root: FullyShardedDataParallel,
  optimizer: AnyOptimizer,
  full: FullOptimStateDict,
): Promise<OptimizerStateDict> {
  const op = 'getShardFromOptimStateDict';
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
  const flatValues: { i: number; key: string; values: Float32Array; numel: number }[] = [];
  const state: OptimizerStateDict['state'] = {};
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
      flatValues.push({ i, key, values, numel: flat.shardNumel });
    }
    state[i] = out;
  }
  const shardBackend = createCpuBackend();
  for (const { i, key, values, numel } of flatValues) {
    const slice = keep(Tensor.empty(shardBackend, [numel], 'f32'));
    slice.write(values.subarray(rank * numel, (rank + 1) * numel));
    state[i]![key] = slice;
  }
  const groups = own.param_groups.map((g, i) => ({ ...full.param_groups[i]!, params: g.params }));
  return { state, param_groups: groups };
}

/**
 * Load a full optimizer state (from `gatherFullOptimStateDict` at any world size) into this rank's
 * optimizer over the shards: `getShardFromOptimStateDict`, then `optimizer.loadStateDict`.
 * Everything is checked before the optimizer is touched. Under `ssdOffload` the loaded state is
 * written to the store and freed ([Note: optimizer state in a store]).
 */
export async function loadFullOptimStateDict(
  root: FullyShardedDataParallel,
  optimizer: AnyOptimizer,
  full: FullOptimStateDict,
): Promise<void> {
  const shard = await getShardFromOptimStateDict(root, optimizer, full);
  try {
    await loadLocalOptimStateDict(root, optimizer, shard);
  } finally {
    freeStateDict(shard);
  }
}

/**
 * [Note: optimizer state in a store]
 * Under `ssdOffload` the optimizer's state tensors live in the store between steps and are freed
 * in memory. The optimizer's own `stateDict()` reads them in synchronously where the store can
 * ([Note: the optimizer's own step through a store]) and hands out its own tensors, which stay in
 * memory until the next step. `localOptimStateDict` is the state dict that works with any store:
 * the state read in (`withShardsInMemory`), copied, and freed again; `loadLocalOptimStateDict` loads
 * one and writes it to the store. `gatherFullOptimStateDict` and `loadFullOptimStateDict` read and
 * write through them. The optimizer's own `loadStateDict` also works: the loaded tensors stay in
 * memory until the next step (or a checkpoint, or these helpers) writes them to the store.
 * Values are the optimizer's own, so an offloaded model's state dict is bit for bit the in-memory
 * model's. While one runs a rank holds its whole shard and state, as in-memory FSDP always does.
 */

/**
 * This rank's optimizer state dict (the optimizer's `stateDict()`, PyTorch's layout, indices over
 * the shards) with every state tensor copied to a CPU backend of its own (the caller frees them),
 * for a model with or without `ssdOffload`: offloaded state is read in from the store for it
 * ([Note: optimizer state in a store]). No collective.
 */
export async function localOptimStateDict(
  root: FullyShardedDataParallel,
  optimizer: AnyOptimizer,
): Promise<OptimizerStateDict> {
  const backend = createCpuBackend();
  return withShardsInMemory(root, optimizer, async () => {
    const own = optimizer.stateDict();
    const state: OptimizerStateDict['state'] = {};
    for (const [i, s] of Object.entries(own.state)) {
      const copy: OptimizerParamState = {};
      for (const [key, value] of Object.entries(s)) {
        if (!(value instanceof Tensor)) {
          copy[key] = value;
          continue;
        }
        const t = keep(Tensor.empty(backend, value.shape, value.dtype));
        t.write(await value.read());
        copy[key] = t;
      }
      state[Number(i)] = copy;
    }
    return { value: { state, param_groups: own.param_groups }, changed: false };
  });
}

/**
 * Load a state dict of this rank's optimizer (`localOptimStateDict`, or the optimizer's own
 * `stateDict()` of an in-memory model) into `optimizer`: `optimizer.loadStateDict`, and under
 * `ssdOffload` the loaded state written to the store and freed. A refused dict changes nothing.
 */
export async function loadLocalOptimStateDict(
  root: FullyShardedDataParallel,
  optimizer: AnyOptimizer,
  dict: OptimizerStateDict,
): Promise<void> {
  await withShardsInMemory(root, optimizer, async () => {
    await optimizer.loadStateDict(dict);
    return { value: undefined, changed: true };
  });
}

function freeStateDict(dict: OptimizerStateDict): void {
  for (const s of Object.values(dict.state)) {
    for (const v of Object.values(s)) if (v instanceof Tensor) v.free();
  }
}

/** Consolidate a flat state tensor from per-rank shards (for offline tools). */
export { consolidateFlat };
