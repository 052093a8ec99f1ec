import type { ProcessGroup } from '@webshard/collectives';
import { keep, Tensor } from '@webshard/tensor-core';
import type { FlatParameter } from './flat-param.js';
import { flatBuffer } from './host-buffers.js';

/**
 * [Note: one rank]
 * On a group of one rank, with the shard's dtype and backend for compute (no mixed precision, no
 * compute backend of its own) and the default pre-division, the shard is the whole flat parameter
 * (padding to a multiple of one adds nothing): the gathered buffer is a second handle on the
 * shard's storage and the reduced gradient is the flat gradient itself, so a step copies nothing
 * and issues no collective. PyTorch's FSDP does the same (it switches to `NO_SHARD` at world size
 * one). The parameters are then views of the shard while gathered, which the optimizer changes
 * only after backward, when every unit is resharded.
 */
export function isSoleRank(group: ProcessGroup, flat: FlatParameter): boolean {
  const { shardBackend, computeBackend, computeDtype } = flat.placement;
  return (
    group.size === 1 &&
    computeDtype === 'f32' &&
    computeBackend === shardBackend &&
    flat.paddedNumel === flat.shardNumel
  );
}

/**
 * Issue the all-gather of `flat`'s full parameters into a new buffer of the compute dtype on the
 * compute backend. Under mixed precision the f32 shard is cast first, so the gather moves 16-bit
 * elements. Resolves once the buffer is filled; the shard must not change before that.
 */
export function gatherFull(group: ProcessGroup, flat: FlatParameter): Promise<Tensor> {
  if (isSoleRank(group, flat)) return Promise.resolve(keep(flat.shard.detach()));
  const { shardBackend, computeBackend, computeDtype } = flat.placement;
  const full = flatBuffer(group, computeBackend, flat.paddedNumel, computeDtype);
  let input = flat.shard;
  let cast: Tensor | null = null;
  if (computeDtype !== 'f32') {
    cast = keep(Tensor.empty(shardBackend, [flat.shardNumel], computeDtype));
    shardBackend.cast(flat.shard.kernel('allGather'), cast.kernel('allGather'));
    input = cast;
  }
  const work = group.allGather(input, full);
  return work.promise.then(
    () => {
      cast?.free();
      return full;
    },
    (error: unknown) => {
      cast?.free();
      full.free();
      throw error;
    },
  );
}

/** How gradients are reduced (see `FsdpOptions`). */
export interface ReduceSettings {
  readonly fp32ReduceScatter: boolean;
  readonly predivide: number;
  readonly postdivide: number;
  /**
   * The same shard's ranks on other nodes (`HYBRID_SHARD`, `NO_SHARD`): each reduced shard is
   * all-reduced over it before it is divided and accumulated ([Note: hybrid sharding]). Null or
   * absent: no replicas.
   */
  readonly replicate?: ProcessGroup | null;
}

/**
 * Reduce-scatter `input` into `out` over `group` and, with a replicate group, all-reduce `out`
 * (this rank's summed shard) over it: the sum over every node's ranks ([Note: hybrid sharding]).
 * The all-reduce is issued when the reduce-scatter completes; reduce-scatters complete in the
 * order they were issued, the same on every node, so the replicate group's all-reduces are too.
 */
export function reduceShard(
  group: ProcessGroup,
  input: Tensor,
  out: Tensor,
  replicate: ProcessGroup | null | undefined,
): Promise<void> {
  const scattered = group.reduceScatter(input, out).promise;
  if (replicate === null || replicate === undefined || replicate.size === 1) return scattered;
  return scattered.then(() => replicate.allReduce(out).promise);
}

/**
 * The reduce-scatter input of a flat gradient: cast to f32 with `fp32ReduceScatter`, divided by
 * the pre-divide factor. `temps` lists what to free once the reduction has read it (`fullGrad`
 * among them: the input takes it over).
 */
export function prepareGrad(
  group: ProcessGroup,
  fullGrad: Tensor,
  settings: ReduceSettings,
): { input: Tensor; temps: Tensor[] } {
  const backend = fullGrad.backend;
  const temps: Tensor[] = [fullGrad];
  let input = fullGrad;
  if (settings.fp32ReduceScatter && input.dtype !== 'f32') {
    const wide = flatBuffer(group, backend, input.size, 'f32');
    backend.cast(input.kernel('reduceScatter'), wide.kernel('reduceScatter'));
    temps.push(wide);
    input = wide;
  }
  if (settings.predivide !== 1) {
    const scaled = flatBuffer(group, backend, input.size, input.dtype);
    backend.binary(
      'div',
      input.kernel('reduceScatter'),
      settings.predivide,
      scaled.kernel('reduceScatter'),
    );
    temps.push(scaled);
    input = scaled;
  }
  return { input, temps };
}

/**
 * Issue the reduce-scatter of `fullGrad` (the flat gradient of the full parameters) and, once it
 * completes, accumulate this rank's averaged part into `flat.shard.grad` in f32: divided by
 * `predivide` before the reduction and by `postdivide` after it (fairscale's order, which keeps
 * 16-bit sums in range). Takes `fullGrad` over and frees it.
 */
export function reduceScatterGrad(
  group: ProcessGroup,
  flat: FlatParameter,
  fullGrad: Tensor,
  settings: ReduceSettings,
): Promise<void> {
  const replicated = settings.replicate !== null && settings.replicate !== undefined;
  const plain =
    settings.predivide === 1 &&
    settings.postdivide === 1 &&
    fullGrad.dtype === 'f32' &&
    !replicated;
  if (plain && isSoleRank(group, flat) && fullGrad.backend === flat.shard.backend) {
    // [Note: one rank]: the flat gradient is the shard's, taken over or added in.
    const shard = flat.shard;
    if (shard.grad === null || shard.grad.isFreed) {
      shard.grad = fullGrad;
      return Promise.resolve();
    }
    const temps = [fullGrad];
    try {
      accumulateShardGrad(group, flat, fullGrad, 1, temps);
    } finally {
      for (const t of temps) t.free();
    }
    return Promise.resolve();
  }
  const { input, temps } = prepareGrad(group, fullGrad, settings);
  const out = flatBuffer(group, flat.shard.backend, flat.shardNumel, input.dtype);
  temps.push(out);
  const freeAll = (): void => {
    for (const t of temps) t.free();
  };
  return reduceShard(group, input, out, settings.replicate).then(
    () => {
      try {
        accumulateShardGrad(group, flat, out, settings.postdivide, temps);
      } finally {
        freeAll();
      }
    },
    (error: unknown) => {
      freeAll();
      throw error;
    },
  );
}

/**
 * Add the reduced part `reduced` (this rank's shard of the summed gradient), divided by
 * `postdivide`, into `flat.shard.grad` in f32 (created when null). Temporaries go to `temps`.
 */
export function accumulateShardGrad(
  group: ProcessGroup,
  flat: FlatParameter,
  reduced: Tensor,
  postdivide: number,
  temps: Tensor[],
): void {
  const backend = reduced.backend;
  let part = reduced;
  if (postdivide !== 1) {
    const scaled = flatBuffer(group, backend, part.size, part.dtype);
    backend.binary('div', part.kernel('reduceScatter'), postdivide, scaled.kernel('reduceScatter'));
    temps.push(scaled);
    part = scaled;
  }
  if (part.dtype !== 'f32') {
    const wide = keep(Tensor.empty(backend, part.shape, 'f32'));
    backend.cast(part.kernel('reduceScatter'), wide.kernel('reduceScatter'));
    temps.push(wide);
    part = wide;
  }
  const shard = flat.shard;
  if (shard.grad === null || shard.grad.isFreed) {
    const grad = flatBuffer(group, backend, shard.size, 'f32');
    backend.copy(part.kernel('reduceScatter'), grad.kernel('reduceScatter'));
    shard.grad = grad;
  } else {
    // Accumulated in place (`grad.add_(part)`): no sum beside the shard's gradient to copy back.
    const into = shard.grad.kernel('reduceScatter');
    backend.binary('add', into, part.kernel('reduceScatter'), into);
  }
}
