import type { Backend, DType, Module, Tensor } from '@webshard/tensor-core';
import type { ResolvedOptions } from './api.js';
import { FsdpWrapError } from './errors.js';
import { type FlatParameter, flattenSources } from './flat-param.js';
import { flatBuffer } from './host-buffers.js';
import { ownParameters } from './module-tree.js';
import { FsdpParamGroup } from './param-group.js';
import { type BorrowedParams, borrowShared, checkNotUsedOutside } from './shared-params.js';
import { SsdShards } from './ssd/ssd-shards.js';

/** What a new unit takes from the module it wraps. */
export interface UnitShards {
  /** The tensors the unit took from the module (before any replacement). */
  readonly sources: readonly Tensor[];
  /** The units whose parameters the module also uses ([Note: parameters shared across units]). */
  readonly borrowed: BorrowedParams;
  readonly flats: readonly FlatParameter[];
  /** Each source tensor and the view of a flat parameter the module now holds instead. */
  readonly replacements: ReadonlyMap<Tensor, Tensor>;
  readonly paramGroup: FsdpParamGroup;
  /** With `ssdOffload`, the shards in their store ([Note: shards in a store]); else null. */
  readonly ssdShards: SsdShards | null;
}

/**
 * Builds a unit's shards from `module`: the parameters it owns (not a nested unit's, which may not
 * be used outside it, nor those another unit lends), flattened into flat parameters placed as the
 * options say (the shards', gradients' and compute backends, the compute dtype), the module's
 * tensors replaced by views of them, and the group that moves them. `nested` are the units already
 * inside `module`; `unitName` names the unit in errors once it knows its path.
 */
export function shardUnit(
  op: string,
  module: Module,
  options: ResolvedOptions,
  isUnit: (m: Module) => boolean,
  nested: readonly { readonly sources: ReadonlySet<Tensor>; readonly typeName: string }[],
  unitName: () => string,
): UnitShards {
  const { group } = options;
  const found = ownParameters(module, isUnit);
  for (const unit of nested) checkNotUsedOutside(op, found, unit.sources, unit.typeName);
  const { sources, borrowed } = borrowShared(module, found);
  const shardBackend = sources[0]?.tensor.backend ?? options.computeBackend;
  if (options.moveParamsToCpu && shardBackend !== undefined && shardBackend.kind !== 'cpu') {
    throw new FsdpWrapError(
      op,
      `moveParamsToCpu keeps the shards where the parameters are, which is ${shardBackend.kind}: build the model on the CPU backend and pass computeBackend`,
    );
  }
  const computeBackend: Backend | undefined = options.computeBackend ?? shardBackend;
  const placement = {
    rank: group.rank,
    worldSize: group.size,
    shardBackend: shardBackend!,
    gradBackend: shardBackend!,
    computeBackend: computeBackend!,
    computeDtype: options.computeDtype,
    allocate: (backend: Backend, count: number, dtype: DType, zeroed?: boolean) =>
      flatBuffer(group, backend, count, dtype, zeroed),
  };
  const replacements = new Map<Tensor, Tensor>();
  const flats = flattenSources(module.typeName, sources, options, placement, replacements);
  if (replacements.size > 0) module.replaceTensors(replacements);
  const paramGroup = new FsdpParamGroup(unitName, group, flats, {
    fp32ReduceScatter: options.fp32ReduceScatter,
    predivide: options.gradientPredivideFactor,
    postdivide: options.gradientPostdivideFactor,
    replicate: options.replicateGroup,
  });
  const ssd = options.ssdOffload; // keyed by world rank (HYBRID_SHARD repeats group ranks)
  const key = group.rank + group.size * (options.replicateGroup?.rank ?? 0);
  return {
    sources: sources.map(({ tensor }) => tensor),
    borrowed,
    flats,
    replacements,
    paramGroup,
    ssdShards: ssd ? new SsdShards(ssd.store, key, flats, ssd) : null,
  };
}
