import { DTypeError } from '../errors.js';
import type { Module } from '../nn/module.js';
import { keep } from '../scope.js';
import { Tensor } from '../tensor.js';

/** Options of `MixedPrecision`. */
export interface MixedPrecisionOptions {
  /** The dtype the model computes in. */
  computeDType: 'f16' | 'bf16';
}

interface Pair {
  readonly master: Tensor;
  readonly compute: Tensor;
}

/**
 * FP32 master weights for a model that computes in f16 or bf16 (apex's O2, fairscale's
 * `mixed_precision`).
 *
 * [Note: mixed precision]
 * The module's f32 parameters BECOME the masters: each is replaced in the module (ties kept) by a
 * compute copy of `computeDType`, so forward and backward run in 16 bits while the optimizer holds
 * the f32 tensors it was given (create it over `masterParams()`). Per step:
 *   1. `await scaler.scale(loss).backward()`  (f16 needs a GradScaler; bf16 usually does not)
 *   2. `gradsToMasters()`   compute grads cast into f32 master grads; compute grads freed
 *   3. `clipGradNorm(masterParams(), ...)`, `await scaler.step(optimizer)`, `scaler.update()`
 *   4. `mastersToCompute()` the updated masters cast (round to nearest even) into the copies
 * An inf in an f16 gradient stays inf through the cast, so the scaler's check on the masters sees it.
 */
export class MixedPrecision {
  readonly computeDType: 'f16' | 'bf16';
  private readonly pairs: Pair[] = [];

  constructor(module: Module, options: MixedPrecisionOptions) {
    this.computeDType = options.computeDType;
    const replacements = new Map<Tensor, Tensor>();
    for (const [name, master] of module.namedParameters()) {
      if (master.dtype !== 'f32') {
        throw new DTypeError(
          'MixedPrecision',
          [master.dtype],
          `parameter '${name}' must be f32 to serve as the master`,
        );
      }
      const compute = keep(Tensor.empty(master.backend, master.shape, this.computeDType));
      compute.name = master.name ?? name;
      master.backend.cast(master.kernel('MixedPrecision'), compute.kernel('MixedPrecision'));
      replacements.set(master, compute);
      this.pairs.push({ master, compute });
    }
    module.replaceTensors(replacements);
    for (const { master } of this.pairs) master.requiresGrad = false;
  }

  /** The f32 masters, in the module's parameter order: give these to the optimizer. */
  masterParams(): Tensor[] {
    return this.pairs.map((p) => p.master);
  }

  /** The compute copies now registered in the module. */
  computeParams(): Tensor[] {
    return this.pairs.map((p) => p.compute);
  }

  /**
   * Cast each compute gradient into its master's f32 `.grad` (overwriting it; created when null)
   * and free the compute gradient. A parameter without a gradient leaves its master's `.grad` null.
   */
  gradsToMasters(): void {
    for (const { master, compute } of this.pairs) {
      const g = compute.grad;
      if (g === null) {
        master.grad?.free();
        master.grad = null;
        continue;
      }
      master.grad ??= keep(Tensor.empty(master.backend, master.shape, 'f32'));
      master.backend.cast(g.kernel('gradsToMasters'), master.grad.kernel('gradsToMasters'));
      g.free();
      compute.grad = null;
    }
  }

  /** Cast the masters into the compute copies (after the optimizer step). */
  mastersToCompute(): void {
    for (const { master, compute } of this.pairs) {
      master.backend.cast(master.kernel('mastersToCompute'), compute.kernel('mastersToCompute'));
    }
  }

  /** Clear the masters' and the compute copies' gradients. */
  zeroGrad(): void {
    for (const { master, compute } of this.pairs) {
      for (const t of [master, compute]) {
        t.grad?.free();
        t.grad = null;
      }
    }
  }
}
