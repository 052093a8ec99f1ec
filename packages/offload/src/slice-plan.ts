import { bytesPerElement, Module, Sequential, type Tensor } from '@webshard/tensor-core';
import { sizeClass } from '@webshard/tensor-core/backend';
import type { Layer } from './api.js';
import { OffloadConfigError } from './errors.js';

/** One slice: consecutive layers that go to the device together. */
export interface Slice {
  readonly index: number;
  readonly layers: readonly Layer[];
  /** Each layer's name in the model (`'3'` for a Sequential's fourth child). */
  readonly layerNames: readonly string[];
  /** The slice's own parameters (deduplicated) and buffers: what moves with it. */
  readonly params: readonly Tensor[];
  readonly buffers: readonly Tensor[];
  /** Elements in the slice's parameters. */
  readonly paramCount: number;
}

/** What the model is cut into. */
export interface SlicePlan {
  readonly slices: readonly Slice[];
  readonly layers: readonly Layer[];
  readonly layerNames: readonly string[];
  /**
   * Tensors of more than one slice (a tied embedding and output layer): in no slice's lists, they
   * stay on the device from the start of forward to the end of backward (see [Note: tied tensors
   * across slices] in offload-model.ts).
   */
  readonly shared: { readonly params: readonly Tensor[]; readonly buffers: readonly Tensor[] };
}

function paramsOf(layer: Layer): Tensor[] {
  return layer.parameters();
}

function countOf(layer: Layer): number {
  let n = 0;
  for (const p of paramsOf(layer)) n += p.size;
  return n;
}

/** Device bytes of a tensor in the caching allocator's size classes. */
export function deviceBytes(t: Tensor): number {
  return sizeClass(Math.max(t.size * bytesPerElement(t.dtype), 4));
}

/** Device bytes a layer needs at least: its parameters, their gradients and its buffers. */
export function layerDeviceBytes(layer: Layer): number {
  let bytes = 0;
  for (const p of paramsOf(layer)) bytes += (p.requiresGrad ? 2 : 1) * deviceBytes(p);
  for (const [, b] of layer.namedBuffers()) bytes += deviceBytes(b);
  return bytes;
}

/**
 * Contiguous cut of `counts` into `k` non-empty parts minimizing the largest part's sum (the
 * linear partition problem, by dynamic programming): returns the start index of each part.
 */
export function balancedCut(counts: readonly number[], k: number): number[] {
  const n = counts.length;
  const prefix = [0];
  for (const c of counts) prefix.push(prefix.at(-1)! + c);
  // best[j][i]: the smallest largest part cutting the first i layers into j parts.
  const best: number[][] = Array.from({ length: k + 1 }, () =>
    new Array<number>(n + 1).fill(Number.POSITIVE_INFINITY),
  );
  const from: number[][] = Array.from({ length: k + 1 }, () => new Array<number>(n + 1).fill(0));
  best[0]![0] = 0;
  for (let j = 1; j <= k; j++) {
    for (let i = j; i <= n; i++) {
      for (let s = j - 1; s < i; s++) {
        const cost = Math.max(best[j - 1]![s]!, prefix[i]! - prefix[s]!);
        // On ties the last part starts as late as possible: a layer without parameters (an
        // activation) stays in the slice of the layer before it.
        if (cost <= best[j]![i]!) {
          best[j]![i] = cost;
          from[j]![i] = s;
        }
      }
    }
  }
  const starts: number[] = [];
  let i = n;
  for (let j = k; j >= 1; j--) {
    const s = from[j]![i]!;
    starts.unshift(s);
    i = s;
  }
  return starts;
}

function layersOf(model: unknown): { layers: Layer[]; names: string[]; given: boolean } {
  if (model instanceof Sequential) {
    const layers = Array.from({ length: model.length }, (_, i) => model.at(i));
    return { layers, names: layers.map((_, i) => String(i)), given: false };
  }
  if (Array.isArray(model) && model.length > 0 && model.every((m) => m instanceof Module)) {
    return { layers: model as Layer[], names: model.map((_, i) => String(i)), given: true };
  }
  throw new OffloadConfigError(
    'model',
    model,
    'must be a Sequential or a non-empty list of slice modules (OffloadModel runs layers one after another)',
  );
}

/**
 * Cut `model` into slices. A `Sequential` is cut into `numSlices` runs of consecutive children
 * whose largest parameter count is as small as possible (fairscale balances parameter counts
 * greedily; this balances them optimally). A list of modules is taken as the slices themselves.
 * Throws `OffloadConfigError` for a model that is neither and for `numSlices` larger than the
 * number of layers. A tensor used by layers of two slices goes to `shared`, in neither slice.
 */
export function planSlices(model: Sequential | readonly Layer[], numSlices: number): SlicePlan {
  const { layers, names, given } = layersOf(model);
  if (!given && numSlices > layers.length) {
    throw new OffloadConfigError(
      'numSlices',
      numSlices,
      `${numSlices} slices asked of a model with ${layers.length} layers`,
    );
  }
  const starts = given ? layers.map((_, i) => i) : balancedCut(layers.map(countOf), numSlices);
  const cuts = starts.map((start, index) => {
    const end = starts[index + 1] ?? layers.length;
    const sliceLayers = layers.slice(start, end);
    const params = new Set<Tensor>();
    const buffers = new Set<Tensor>();
    for (const layer of sliceLayers) {
      for (const p of paramsOf(layer)) params.add(p);
      for (const [, b] of layer.namedBuffers()) buffers.add(b);
    }
    return { index, start, end, sliceLayers, params, buffers };
  });
  // A tensor in two slices would be moved off the device by one while the other computes with it.
  const slicesOf = new Map<Tensor, number>();
  for (const cut of cuts) {
    for (const t of [...cut.params, ...cut.buffers]) slicesOf.set(t, (slicesOf.get(t) ?? 0) + 1);
  }
  const isShared = (t: Tensor) => slicesOf.get(t)! > 1;
  const shared = { params: new Set<Tensor>(), buffers: new Set<Tensor>() };
  const slices = cuts.map(({ index, start, end, sliceLayers, params, buffers }): Slice => {
    for (const p of params) if (isShared(p)) shared.params.add(p);
    for (const b of buffers) if (isShared(b)) shared.buffers.add(b);
    const own = [...params].filter((p) => !isShared(p));
    let paramCount = 0;
    for (const p of own) paramCount += p.size;
    return {
      index,
      layers: sliceLayers,
      layerNames: names.slice(start, end),
      params: own,
      buffers: [...buffers].filter((b) => !isShared(b)),
      paramCount,
    };
  });
  return {
    slices,
    layers,
    layerNames: names,
    shared: { params: [...shared.params], buffers: [...shared.buffers] },
  };
}
