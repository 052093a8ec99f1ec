import {
  cast,
  clearAutocastCache,
  isFloatDType,
  keep,
  type Module,
  Tensor,
} from '@webshard/tensor-core';
import type { ResolvedOptions } from './api.js';
import { forEachTensor, mapTensors } from './module-tree.js';

/**
 * The root's lazy init: under mixed precision, `module`'s floating buffers in `bufferDtype`, and on
 * the compute backend when one is given (fairscale's `buffer_dtype`, `compute_device`).
 */
export async function castBuffers(module: Module, options: ResolvedOptions): Promise<void> {
  const { bufferDtype, mixedPrecision } = options;
  const backend = options.computeBackend;
  if (!mixedPrecision && backend === undefined) return;
  const replacements = new Map<Tensor, Tensor>();
  for (const [, b] of module.namedBuffers()) {
    if (!isFloatDType(b.dtype)) continue;
    const target = backend ?? b.backend;
    const dtype = mixedPrecision ? bufferDtype : b.dtype;
    if (b.dtype === dtype && b.backend === target) continue;
    const moved = keep(await b.to(target));
    const out = keep(Tensor.empty(target, b.shape, dtype));
    target.cast(moved.kernel('castBuffers'), out.kernel('castBuffers'));
    if (moved !== b) moved.free();
    out.name = b.name;
    replacements.set(b, out);
  }
  if (replacements.size > 0) module.replaceTensors(replacements);
}

/**
 * [Note: input casts]
 * The root casts every floating tensor inside its inputs (arrays, maps, sets and plain objects
 * too, fairscale's `apply_to_tensors`) to the compute dtype under mixed precision, or to f32 with
 * `forceInputToFp32`. The casts are the root's own tensors: it frees them once the wrapped module
 * returned (autograd holds its own reference to whatever it saved), except a cast the output
 * contains, so repeated forwards leave nothing behind.
 */
export function castInputs<Args extends unknown[]>(
  args: Args,
  options: ResolvedOptions,
): { readonly inputs: Args; readonly casts: Tensor[] } {
  const { mixedPrecision, computeDtype, forceInputToFp32 } = options;
  const target = mixedPrecision ? computeDtype : forceInputToFp32 ? 'f32' : null;
  const casts: Tensor[] = [];
  if (target === null) return { inputs: args, casts };
  const inputs = mapTensors(args, (a) => {
    if (!isFloatDType(a.dtype) || a.dtype === target) return a;
    const out = cast(a, target);
    casts.push(out);
    return out;
  }) as Args;
  return { inputs, casts };
}

/**
 * What a unit's forward cast, let go when it ends: the root's input casts, but not one the output
 * holds ([Note: input casts]), and with `clearAutocastCache` the casts of parameters that
 * `autocast` cached during the forward (fairscale clears them after each forward: the next gather
 * may bring other values into the same parameters).
 */
export function freeCasts(
  casts: readonly Tensor[],
  output: unknown,
  options: Pick<ResolvedOptions, 'clearAutocastCache'>,
): void {
  if (options.clearAutocastCache) clearAutocastCache();
  if (casts.length === 0) return;
  const kept = new Set<Tensor>();
  forEachTensor(output, (t) => kept.add(t));
  for (const t of casts) if (!kept.has(t)) t.free();
}
