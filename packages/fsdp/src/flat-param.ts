import { type Backend, type DType, keep, Tensor } from '@webshard/tensor-core';
import { markParameter } from '@webshard/tensor-core/autograd';
import type { KernelTensor } from '@webshard/tensor-core/backend';
import { FsdpWrapError } from './errors.js';

/** One original parameter inside a flat parameter. */
export interface FlatParamEntry {
  /** The tensor the module computes with: its identity is kept, its storage swapped. */
  readonly param: Tensor;
  /** Its names relative to the unit's module; a parameter tied within the unit has several. */
  readonly names: readonly string[];
  readonly shape: readonly number[];
  readonly numel: number;
  /** Element offset in the flat buffer. */
  readonly offset: number;
}

/** Whether the full parameters are gathered. See [Note: the flat parameter]. */
export type ShardedState = 'sharded' | 'unsharded';

/** What a flat parameter is built from: each parameter's current data and its names. */
export interface FlatParamSource {
  readonly tensor: Tensor;
  readonly names: readonly string[];
}

/** Where a flat parameter keeps and computes. */
export interface FlatParamPlacement {
  readonly rank: number;
  readonly worldSize: number;
  /** Backend of the FP32 shard (and of the optimizer state). */
  readonly shardBackend: Backend;
  /** Backend of the sharded FP32 gradient. */
  readonly gradBackend: Backend;
  /** Backend of the full parameters, forward and backward. */
  readonly computeBackend: Backend;
  /** dtype of the full parameters and of their gradients. */
  readonly computeDtype: DType;
  /**
   * A flat buffer that collectives read or write: in registered memory on host data ([Note: flat
   * buffers in registered memory]), else `Tensor.empty`. Kept (`keep`); contents undefined, or
   * zeros with `zeroed`.
   */
  readonly allocate: (backend: Backend, count: number, dtype: DType, zeroed?: boolean) => Tensor;
}

function kernelSlice(t: Tensor, offset: number, count: number, op: string): KernelTensor {
  return { ...t.kernel(op), offset: t.offset + offset, shape: [count] };
}

/**
 * [Note: the flat parameter]
 * A unit's parameters (those with the same `requiresGrad` at wrap time, so frozen weights never
 * reach the optimizer; afterwards the shard's `requiresGrad` decides, copied to the parameters at
 * each forward, so a unit frozen or unfrozen through its `parameters()` is honoured) are laid end
 * to end in one flat buffer of `numel` elements, padded to `paddedNumel`, a
 * multiple of the world size, so every rank's shard has `shardNumel` elements and the padding sits
 * at the end of the last shards. Rank r keeps elements `[r * shardNumel, (r + 1) * shardNumel)` as
 * `shard`, an f32 leaf that the optimizer steps on (the FP32 master). The original parameters stay
 * leaves of their own shapes, registered in their modules under their names:
 * - `sharded`: each parameter has no storage (`free()`): using it is a `FreedTensorError` naming it.
 * - `unsharded`: `full` holds the gathered parameters in the compute dtype on the compute backend
 *   and each parameter is a view of it (`setData`), so autograd, which saves parameters by
 *   reference, reads them there.
 * When the compute dtype or backend differs from the shard's, the module's parameters are replaced
 * once, at wrap time, by tensors of the compute dtype and backend (as tensor-core's
 * `MixedPrecision` does): those are the parameters whose identity FSDP keeps from then on.
 * In backward each parameter's `.grad` is a view of `fullGrad`, so autograd accumulates into the flat
 * gradient in place and the reduce-scatter reads it with no gather step.
 */
export class FlatParameter {
  readonly entries: readonly FlatParamEntry[];
  readonly numel: number;
  readonly paddedNumel: number;
  readonly shardNumel: number;
  /** This rank's FP32 shard: give it to the optimizer. */
  readonly shard: Tensor;
  readonly placement: FlatParamPlacement;
  /** The gathered parameters while `unsharded`. */
  full: Tensor | null = null;
  /** The flat gradient of the full parameters during backward (and across `noSync`). */
  fullGrad: Tensor | null = null;
  private state: ShardedState = 'unsharded';

  /**
   * Lay `sources` out flat and keep this rank's shard. The sources' data is read with kernels on
   * their backend; afterwards the entries' parameters hold no storage (`sharded`).
   */
  constructor(
    unitName: string,
    index: number,
    sources: readonly FlatParamSource[],
    placement: FlatParamPlacement,
    replacements: Map<Tensor, Tensor>,
  ) {
    const first = sources[0]!.tensor;
    this.placement = placement;
    for (const { tensor, names } of sources) {
      if (tensor.dtype !== 'f32') {
        throw new FsdpWrapError(
          'FullyShardedDataParallel',
          `parameter '${names[0]}' of unit '${unitName}' is ${tensor.dtype}: FSDP keeps f32 masters, so wrap f32 parameters (use mixedPrecision for 16-bit compute)`,
        );
      }
      if (tensor.backend !== placement.shardBackend) {
        throw new FsdpWrapError(
          'FullyShardedDataParallel',
          `parameter '${names[0]}' of unit '${unitName}' is on ${tensor.backend.kind}, '${sources[0]!.names[0]}' on ${first.backend.kind}: a unit's parameters must share a backend`,
        );
      }
    }
    let offset = 0;
    const entries: FlatParamEntry[] = [];
    for (const { tensor, names } of sources) {
      let param = tensor;
      if (placement.computeDtype !== 'f32' || placement.computeBackend !== tensor.backend) {
        param = keep(Tensor.empty(placement.computeBackend, tensor.shape, placement.computeDtype));
        param.name = tensor.name;
        param.requiresGrad = tensor.requiresGrad;
        markParameter(param);
        replacements.set(tensor, param);
      }
      entries.push({ param, names, shape: tensor.shape, numel: tensor.size, offset });
      offset += tensor.size;
    }
    this.entries = entries;
    this.numel = offset;
    const world = placement.worldSize;
    this.shardNumel = Math.max(1, Math.ceil(offset / world));
    this.paddedNumel = this.shardNumel * world;
    const backend = placement.shardBackend;
    const flat = Tensor.empty(backend, [this.paddedNumel], 'f32');
    try {
      backend.fill(flat.kernel('flatten'), 0);
      sources.forEach(({ tensor }, i) => {
        const e = entries[i]!;
        backend.copy(
          { ...tensor.kernel('flatten'), shape: [e.numel] },
          kernelSlice(flat, e.offset, e.numel, 'flatten'),
        );
      });
      this.shard = placement.allocate(backend, this.shardNumel, 'f32');
      backend.copy(
        kernelSlice(flat, placement.rank * this.shardNumel, this.shardNumel, 'flatten'),
        this.shard.kernel('flatten'),
      );
    } finally {
      flat.free();
    }
    this.shard.name = `${unitName === '' ? '' : `${unitName}.`}flat_param_${index}`;
    this.shard.requiresGrad = first.requiresGrad;
    markParameter(this.shard);
    for (const { tensor } of sources) tensor.free();
    for (const e of entries) e.param.free();
    this.state = 'sharded';
  }

  /**
   * Whether the flat parameter trains: its shard's `requiresGrad`, which the user may change after
   * wrapping (fairscale's way to freeze a unit: `requiresGrad = false` on its `parameters()`).
   */
  get requiresGrad(): boolean {
    return this.shard.requiresGrad;
  }

  /** Give the entries' parameters the shard's `requiresGrad` (each forward, before computing). */
  syncRequiresGrad(): void {
    const wanted = this.shard.requiresGrad;
    for (const e of this.entries)
      if (e.param.requiresGrad !== wanted) e.param.requiresGrad = wanted;
  }

  get shardedState(): ShardedState {
    return this.state;
  }

  /** Point every parameter at its view of `full` (gathered by the caller). */
  useFull(full: Tensor): void {
    this.full = full;
    for (const e of this.entries) {
      const view = full.view(e.shape, e.offset);
      e.param.setData(view);
      view.free();
    }
    this.state = 'unsharded';
  }

  /** Free the full parameters: every parameter loses its storage. */
  freeFull(): void {
    for (const e of this.entries) e.param.free();
    this.full?.free();
    this.full = null;
    this.state = 'sharded';
  }

  /**
   * Make each parameter's `.grad` a view of a zeroed `fullGrad` (kept when it already exists:
   * gradients accumulating across `noSync` iterations).
   */
  attachGrads(): void {
    if (!this.requiresGrad) return;
    const backend = this.placement.computeBackend;
    if (this.fullGrad === null) {
      this.fullGrad = this.placement.allocate(
        backend,
        this.paddedNumel,
        this.placement.computeDtype,
        true,
      );
    }
    const storage = this.fullGrad.storage();
    for (const e of this.entries) {
      const current = e.param.grad;
      if (current !== null && !current.isFreed && current.storage() === storage) continue;
      current?.free();
      e.param.grad = keep(this.fullGrad.view(e.shape, e.offset));
    }
  }

  /** Drop the parameters' gradient views and the flat gradient. */
  detachGrads(): Tensor | null {
    for (const e of this.entries) {
      e.param.grad?.free();
      e.param.grad = null;
    }
    const g = this.fullGrad;
    this.fullGrad = null;
    return g;
  }

  /** The number of entries whose parameter requires grad (distinct tensors). */
  get gradCount(): number {
    return this.requiresGrad ? this.entries.length : 0;
  }
}

/**
 * A unit's flat parameters from its own parameters: with `flattenParameters`, one of the trainable
 * and one of the frozen ones (either left out when empty), else one per parameter.
 */
export function flattenSources(
  unitName: string,
  sources: readonly FlatParamSource[],
  options: { readonly flattenParameters: boolean },
  placement: FlatParamPlacement,
  replacements: Map<Tensor, Tensor>,
): FlatParameter[] {
  const groups: FlatParamSource[][] = [];
  if (options.flattenParameters) {
    const trainable = sources.filter((s) => s.tensor.requiresGrad);
    const frozen = sources.filter((s) => !s.tensor.requiresGrad);
    if (trainable.length > 0) groups.push(trainable);
    if (frozen.length > 0) groups.push(frozen);
  } else {
    for (const s of sources) groups.push([s]);
  }
  return groups.map((g, i) => new FlatParameter(unitName, i, g, placement, replacements));
}
