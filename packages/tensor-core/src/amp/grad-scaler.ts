import { ArgumentError, BackendError, StateError } from '../errors.js';
import { mul } from '../ops/index.js';
import type { StepOptions } from '../optim/optimizer.js';
import { Tensor } from '../tensor.js';

/** What `GradScaler` needs of an optimizer: its tensors (whose `.grad` it checks) and `step`. */
export interface ScalableOptimizer {
  readonly params: readonly Tensor[];
  step(options?: StepOptions): void;
}

/** Options of `GradScaler`; defaults are PyTorch's. */
export interface GradScalerOptions {
  /** Default 2^16. */
  initScale?: number;
  /** Default 2. */
  growthFactor?: number;
  /** Default 0.5. */
  backoffFactor?: number;
  /** Consecutive steps without inf/NaN before the scale grows. Default 2000. */
  growthIntervalSteps?: number;
  /** When false every method is a pass-through (scale 1, steps always taken). Default true. */
  enabled?: boolean;
  /**
   * Make the inf/NaN check collective: receives this rank's flag (1 if a gradient here is not
   * finite, else 0) and resolves to the global one (an all-reduce max), so every rank skips or
   * takes the step together and the scales never diverge.
   */
  reduceFoundInf?: (localFoundInf: number) => Promise<number>;
}

/** Where an optimizer is in the current iteration (PyTorch's OptState). */
type OptimizerStage =
  | { readonly stage: 'ready' }
  | { readonly stage: 'unscaled'; readonly foundInf: boolean }
  | { readonly stage: 'stepped'; readonly foundInf: boolean };

/** A GradScaler's state in PyTorch's layout. */
export interface GradScalerStateDict {
  scale: number;
  growth_factor: number;
  backoff_factor: number;
  growth_interval: number;
  _growth_tracker: number;
}

/**
 * Dynamic loss scaling for f16 training, with PyTorch's `torch.cuda.amp.GradScaler` semantics:
 * `scale(loss)` multiplies the loss; `unscale(optimizer)` divides the gradients in place and
 * checks them; `step(optimizer)` skips the update when a gradient is inf or NaN; `update()` halves
 * the scale after a skipped step and doubles it after `growthIntervalSteps` good ones in a row.
 *
 * [Note: the loss scaler's inf check]
 * All gradients of an optimizer are checked by the backend's `checkFinite` kernel into ONE i32 flag,
 * read back once per step. `reduceFoundInf` turns the local flag into the global one, so ranks that
 * hold different shards agree on skipping: a scaler that skips on one rank and steps on another
 * diverges the model and, with sharded optimizers, deadlocks the next collective. When `step` is
 * called without `unscale`, the gradients are not divided in place: 1/scale is fused into the
 * optimizer's update kernel (`gradScale`), so `.grad` keeps the scaled values after the step.
 */
export class GradScaler {
  private scaleValue: number;
  private growthTracker = 0;
  private growthFactor: number;
  private backoffFactor: number;
  private growthInterval: number;
  readonly enabled: boolean;
  private readonly reduceFoundInf: ((local: number) => Promise<number>) | undefined;
  private readonly stages = new Map<ScalableOptimizer, OptimizerStage>();

  constructor(options: GradScalerOptions = {}) {
    this.scaleValue = options.initScale ?? 2 ** 16;
    this.growthFactor = options.growthFactor ?? 2;
    this.backoffFactor = options.backoffFactor ?? 0.5;
    this.growthInterval = options.growthIntervalSteps ?? 2000;
    this.enabled = options.enabled ?? true;
    this.reduceFoundInf = options.reduceFoundInf;
    if (!(this.scaleValue > 0)) {
      throw new ArgumentError('GradScaler', `initScale ${this.scaleValue} must be positive`);
    }
    if (!(this.growthFactor > 1)) {
      throw new ArgumentError('GradScaler', `growthFactor ${this.growthFactor} must be > 1`);
    }
    if (!(this.backoffFactor > 0 && this.backoffFactor < 1)) {
      throw new ArgumentError(
        'GradScaler',
        `backoffFactor ${this.backoffFactor} must be in (0, 1)`,
      );
    }
    if (!(Number.isInteger(this.growthInterval) && this.growthInterval > 0)) {
      throw new ArgumentError(
        'GradScaler',
        `growthIntervalSteps ${this.growthInterval} must be a positive integer`,
      );
    }
  }

  /** The current scale (1 when disabled). */
  getScale(): number {
    return this.enabled ? this.scaleValue : 1;
  }

  /** `loss * scale`, recorded by autograd; the loss itself when disabled. */
  scale(loss: Tensor): Tensor {
    return this.enabled ? mul(loss, this.scaleValue) : loss;
  }

  private stageOf(optimizer: ScalableOptimizer): OptimizerStage {
    return this.stages.get(optimizer) ?? { stage: 'ready' };
  }

  /** 1 if any gradient is inf or NaN on any rank (through `reduceFoundInf`), else 0. */
  private async findInf(grads: readonly Tensor[]): Promise<boolean> {
    let local = 0;
    if (grads.length > 0) {
      const backend = grads[0]!.backend;
      const flag = Tensor.empty(backend, [1], 'i32');
      try {
        backend.fill(flag.kernel('GradScaler'), 0);
        for (const g of grads) {
          if (g.backend !== backend) {
            throw new BackendError(
              'GradScaler',
              `gradients on two backends (${backend.kind} and ${g.backend.kind})`,
            );
          }
          backend.checkFinite(g.kernel('GradScaler'), flag.kernel('GradScaler'));
        }
        local = (await flag.item()) !== 0 ? 1 : 0;
      } finally {
        flag.free();
      }
    }
    const global = this.reduceFoundInf ? await this.reduceFoundInf(local) : local;
    return global !== 0;
  }

  private gradsOf(optimizer: ScalableOptimizer): Tensor[] {
    const grads: Tensor[] = [];
    for (const p of optimizer.params) if (p.grad !== null) grads.push(p.grad);
    return grads;
  }

  /**
   * Divide the optimizer's gradients by the scale in place and check them (PyTorch's `unscale_`),
   * e.g. before `clipGradNorm`. At most once per optimizer between updates.
   */
  async unscale(optimizer: ScalableOptimizer): Promise<void> {
    if (!this.enabled) return;
    const current = this.stageOf(optimizer);
    if (current.stage !== 'ready') {
      throw new StateError(
        'GradScaler.unscale',
        current.stage,
        'unscaled',
        'unscale() was already called on this optimizer (or it stepped) since the last update()',
      );
    }
    const grads = this.gradsOf(optimizer);
    const foundInf = await this.findInf(grads);
    const inverse = Math.fround(1 / this.scaleValue);
    // In place (`g.mul_(inverse)`): no scaled copy of each gradient to copy back.
    for (const g of grads) {
      const kernel = g.kernel('GradScaler');
      g.backend.binary('mul', kernel, inverse, kernel);
    }
    this.stages.set(optimizer, { stage: 'unscaled', foundInf });
  }

  /**
   * Step the optimizer unless a gradient is inf or NaN (on any rank). Resolves to whether the step
   * was taken. Once per optimizer between updates.
   */
  async step(optimizer: ScalableOptimizer): Promise<boolean> {
    if (!this.enabled) {
      optimizer.step();
      return true;
    }
    const current = this.stageOf(optimizer);
    if (current.stage === 'stepped') {
      throw new StateError(
        'GradScaler.step',
        'stepped',
        'stepped',
        'step() was already called on this optimizer since the last update()',
      );
    }
    let foundInf: boolean;
    if (current.stage === 'unscaled') {
      foundInf = current.foundInf;
      if (!foundInf) optimizer.step();
    } else {
      foundInf = await this.findInf(this.gradsOf(optimizer));
      if (!foundInf) optimizer.step({ gradScale: Math.fround(1 / this.scaleValue) });
    }
    this.stages.set(optimizer, { stage: 'stepped', foundInf });
    return !foundInf;
  }

  /**
   * Adjust the scale for the next iteration (PyTorch's `update`): back off after an inf/NaN, grow
   * after `growthIntervalSteps` clean steps in a row; or set `newScale` explicitly.
   */
  update(newScale?: number): void {
    if (!this.enabled) return;
    if (newScale !== undefined) {
      if (!(newScale > 0))
        throw new ArgumentError('GradScaler.update', `scale ${newScale} must be positive`);
      this.scaleValue = newScale;
      this.stages.clear();
      return;
    }
    const checked = [...this.stages.values()].flatMap((s) => (s.stage === 'ready' ? [] : [s]));
    if (checked.length === 0) {
      throw new StateError(
        'GradScaler.update',
        'ready',
        'updated',
        'no inf checks were recorded: call unscale() or step() before update()',
      );
    }
    const foundInf = checked.some((s) => s.foundInf);
    if (foundInf) {
      this.scaleValue *= this.backoffFactor;
      this.growthTracker = 0;
    } else if (this.growthTracker + 1 === this.growthInterval) {
      const grown = this.scaleValue * this.growthFactor;
      if (Number.isFinite(Math.fround(grown))) this.scaleValue = grown;
      this.growthTracker = 0;
    } else {
      this.growthTracker++;
    }
    this.stages.clear();
  }

  /** The scaler's state in PyTorch's layout. */
  stateDict(): GradScalerStateDict {
    return {
      scale: this.scaleValue,
      growth_factor: this.growthFactor,
      backoff_factor: this.backoffFactor,
      growth_interval: this.growthInterval,
      _growth_tracker: this.growthTracker,
    };
  }

  /** Restore the scale, factors, interval and growth tracker. */
  loadStateDict(dict: GradScalerStateDict): void {
    if (!(dict.scale > 0) || !Number.isInteger(dict._growth_tracker)) {
      throw new ArgumentError('GradScaler.loadStateDict', 'scale and _growth_tracker are invalid');
    }
    this.scaleValue = dict.scale;
    this.growthFactor = dict.growth_factor;
    this.backoffFactor = dict.backoff_factor;
    this.growthInterval = dict.growth_interval;
    this.growthTracker = dict._growth_tracker;
  }
}
