import { cast, isFloatDType, keep, type Module, Tensor } from '@webshard/tensor-core';
import type { ResolvedOptions } from './api.js';

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

/** The root casts floating inputs to the compute dtype (or to f32 with `forceInputToFp32`). */
export function castInputs<Args extends unknown[]>(args: Args, options: ResolvedOptions): Args {
  const { mixedPrecision, computeDtype, forceInputToFp32 } = options;
  const target = mixedPrecision ? computeDtype : forceInputToFp32 ? 'f32' : null;
  if (target === null) return args;
  return args.map((a) =>
    a instanceof Tensor && isFloatDType(a.dtype) && a.dtype !== target ? cast(a, target) : a,
  ) as Args;
}
