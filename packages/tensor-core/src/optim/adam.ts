import { ArgumentError, DTypeError } from '../errors.js';
import { hostStep } from '../capture/host-step.js';
import { adamOperands, applyAdam } from '../ops/optim.js';
import type { Tensor } from '../tensor.js';
import {
  numberFrom,
  Optimizer,
  type OptimizerParamState,
  type ParamGroup,
  type ParamGroupInput,
  type StepOptions,
  stateTensorFrom,
  zerosState,
} from './optimizer.js';

/** Hyperparameters of Adam / AdamW (PyTorch's names in camelCase). */
export interface AdamHyperparameters {
  lr: number;
  betas: [number, number];
  eps: number;
  weightDecay: number;
}

/** Adam's state of one parameter. */
export interface AdamState {
  step: number;
  expAvg: Tensor;
  expAvgSq: Tensor;
}

/**
 * Adam (Kingma and Ba) with PyTorch's exact update: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
 * p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). Weight decay adds `wd * p` to the
 * gradient (L2). Runs the backend's fused `adam` kernel through `applyAdam` (ops/optim.ts), as
 * `adamStep` does; parameters and state are f32, gradients f32, f16 or bf16. Defaults as PyTorch: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.
 */
export class Adam extends Optimizer<AdamHyperparameters, AdamState> {
  constructor(
    params: Iterable<Tensor> | Iterable<ParamGroupInput<AdamHyperparameters>>,
    options: Partial<AdamHyperparameters> = {},
    /** AdamW passes its name and decoupled weight decay. */
    protected readonly variant: { name: string; decoupled: boolean } = {
      name: 'Adam',
      decoupled: false,
    },
  ) {
    super(variant.name, params, {
      lr: options.lr ?? 1e-3,
      betas: options.betas ?? [0.9, 0.999],
      eps: options.eps ?? 1e-8,
      weightDecay: options.weightDecay ?? 0,
    });
  }

  protected validate(group: ParamGroup<AdamHyperparameters>): void {
    const [b1, b2] = group.betas;
    if (!(group.lr >= 0)) throw new ArgumentError(this.opName, `invalid learning rate ${group.lr}`);
    if (!(group.eps >= 0)) throw new ArgumentError(this.opName, `invalid eps ${group.eps}`);
    if (!(b1 >= 0 && b1 < 1)) throw new ArgumentError(this.opName, `invalid beta1 ${b1}`);
    if (!(b2 >= 0 && b2 < 1)) throw new ArgumentError(this.opName, `invalid beta2 ${b2}`);
    if (!(group.weightDecay >= 0)) {
      throw new ArgumentError(this.opName, `invalid weight decay ${group.weightDecay}`);
    }
    for (const p of group.params) {
      if (p.dtype !== 'f32') {
        throw new DTypeError(
          this.opName,
          [p.dtype],
          `parameter ${p} must be f32 (keep an f32 master, see MixedPrecision)`,
        );
      }
    }
  }

  step(options: StepOptions = {}): void {
    this.checkGrads();
    const gradScale = options.gradScale ?? 1;
    this.forEachGrad((group, p, grad) => {
      let state = this.state.get(p);
      if (state === undefined) {
        state = { step: 0, expAvg: zerosState(p), expAvgSq: zerosState(p) };
        this.state.set(p, state);
      }
      // A host step: a replay of a captured step counts the step and reads the learning rate
      // anew ([Note: host steps in a captured step]), on the operands as they are now.
      const st = state;
      const operands = adamOperands(this.opName, p, grad, st);
      const decoupled = this.variant.decoupled;
      hostStep(() => {
        st.step++;
        applyAdam(operands, {
          lr: group.lr,
          beta1: group.betas[0],
          beta2: group.betas[1],
          eps: group.eps,
          weightDecay: group.weightDecay,
          step: st.step,
          decoupled,
          gradScale,
        });
      });
    });
  }

  protected groupToDict(group: ParamGroup<AdamHyperparameters>): Record<string, unknown> {
    return {
      lr: group.lr,
      betas: [...group.betas],
      eps: group.eps,
      weight_decay: group.weightDecay,
      amsgrad: false,
      maximize: false,
      foreach: null,
      capturable: false,
    };
  }

  protected groupFromDict(dict: Record<string, unknown>): Partial<AdamHyperparameters> {
    const betas = dict.betas as [number, number];
    return {
      lr: Number(dict.lr),
      betas: [Number(betas[0]), Number(betas[1])],
      eps: Number(dict.eps),
      weightDecay: Number(dict.weight_decay),
    };
  }

  protected stateToDict(state: AdamState): OptimizerParamState {
    return { step: state.step, exp_avg: state.expAvg, exp_avg_sq: state.expAvgSq };
  }

  protected async stateFromDict(param: Tensor, dict: OptimizerParamState): Promise<AdamState> {
    const op = `${this.opName}.loadStateDict`;
    return {
      step: await numberFrom(op, dict, 'step'),
      expAvg: await stateTensorFrom(op, param, dict.exp_avg),
      expAvgSq: await stateTensorFrom(op, param, dict.exp_avg_sq),
    };
  }
}

/**
 * AdamW (Loshchilov and Hutter): Adam with decoupled weight decay, `p *= 1 - lr * wd` before the
 * Adam update, as PyTorch. Default weight decay 0.01.
 */
export class AdamW extends Adam {
  constructor(
    params: Iterable<Tensor> | Iterable<ParamGroupInput<AdamHyperparameters>>,
    options: Partial<AdamHyperparameters> = {},
  ) {
    super(
      params,
      { ...options, weightDecay: options.weightDecay ?? 0.01 },
      { name: 'AdamW', decoupled: true },
    );
  }
}
