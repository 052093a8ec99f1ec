import type { Tensor } from '@webshard/tensor-core';
import type { FlatParameter } from './flat-param.js';
import type { FullyShardedDataParallel } from './fully-sharded.js';
import { cleanPath } from './module-tree.js';

/** Where one original parameter sits in its flat parameter. */
export interface EntryLayout {
  /** Its names relative to the root, in state-dict order (a tied parameter has several). */
  readonly names: readonly string[];
  readonly shape: readonly number[];
  readonly offset: number;
  readonly numel: number;
}

/** One flat parameter: what rebuilds full tensors from its shards. */
export interface FlatParamLayout {
  /** The key of its shard: `<unit path>.flat_param_<i>` (`flat_param_<i>` for the root). */
  readonly key: string;
  readonly requiresGrad: boolean;
  readonly numel: number;
  readonly paddedNumel: number;
  readonly entries: readonly EntryLayout[];
}

/**
 * [Note: the sharded layout]
 * Everything needed to rebuild full parameters from shards without a process group, and to cut
 * them again for another world size: per flat parameter its shard key, its real and padded length
 * and where each original parameter sits in it. The layout depends on the world size only through
 * `paddedNumel` (the padding to a multiple of it); the order of entries is the module's, so the
 * same model wrapped the same way at any world size has the same keys, entries and `numel`.
 */
export interface ShardedLayout {
  readonly worldSize: number;
  readonly flatParams: readonly FlatParamLayout[];
  /** Buffers (not sharded), by name. */
  readonly buffers: readonly string[];
}

/** A unit's flat parameters with their keys, the root's first, in unit order. */
export function flatParamsOf(
  root: FullyShardedDataParallel,
): { key: string; flat: FlatParameter; unit: FullyShardedDataParallel }[] {
  return root.units().flatMap((unit) =>
    unit.flatParameters.map((flat, i) => ({
      key: `${unit.modulePath === '' ? '' : `${unit.modulePath}.`}flat_param_${i}`,
      flat,
      unit,
    })),
  );
}

/** Each parameter's names relative to the root, in the wrapped module's state-dict order. */
function namesByParam(root: FullyShardedDataParallel): Map<Tensor, string[]> {
  const names = new Map<Tensor, string[]>();
  for (const [key, t] of root.module.stateDict()) {
    const name = cleanPath(key);
    const list = names.get(t);
    if (list === undefined) names.set(t, [name]);
    else list.push(name);
  }
  return names;
}

/** The layout of `root`'s flat parameters and buffers. */
export function shardedLayout(root: FullyShardedDataParallel): ShardedLayout {
  const names = namesByParam(root);
  const paramSet = new Set(
    root.units().flatMap((u) => u.flatParameters.flatMap((f) => f.entries.map((e) => e.param))),
  );
  const buffers: string[] = [];
  for (const [key, t] of root.module.stateDict())
    if (!paramSet.has(t)) buffers.push(cleanPath(key));
  return {
    worldSize: root.options.group.size,
    flatParams: flatParamsOf(root).map(({ key, flat }) => ({
      key,
      requiresGrad: flat.requiresGrad,
      numel: flat.numel,
      paddedNumel: flat.paddedNumel,
      entries: flat.entries.map((e) => ({
        names: names.get(e.param) ?? [e.param.name ?? ''],
        shape: e.shape,
        offset: e.offset,
        numel: e.numel,
      })),
    })),
    buffers,
  };
}

/** The buffers of the wrapped module by clean name (the module's own tensors, not copies). */
export function buffersOf(
  root: FullyShardedDataParallel,
  layout: ShardedLayout,
): Map<string, Tensor> {
  const wanted = new Set(layout.buffers);
  const out = new Map<string, Tensor>();
  for (const [key, t] of root.module.stateDict()) {
    const name = cleanPath(key);
    if (wanted.has(name) && !out.has(name)) out.set(name, t);
  }
  return out;
}
