import { ArgumentError, DTypeError } from '../errors.js';
import { hostStep } from '../capture/host-step.js';
import { Tensor } from '../tensor.js';
import {
  Optimizer,
  type OptimizerParamState,
  type ParamGroup,
  type ParamGroupInput,
  type StepOptions,
  stateTensorFrom,
} from './optimizer.js';
import { keep } from '../scope.js';

/** Hyperparameters of SGD (PyTorch's names in camelCase). */
export interface SgdHyperparameters {
  lr: number;
  momentum: number;
  dampening: number;
  weightDecay: number;
  nesterov: boolean;
}

/** SGD's state of one parameter: the momentum buffer (null until the first step with momentum). */
export interface SgdState {
  momentumBuffer: Tensor | null;
}

/**
 * Stochastic gradient descent with PyTorch's formulas: g += wd p; with momentum, b = g on the
 * first step and b = momentum b + (1 - dampening) g after; g = nesterov ? g + momentum b : b;
 * p -= lr g. Runs the backend's fused `sgd` kernel through `applySgd` (ops/optim.ts), as `sgdStep`
 * does. `lr` is required, as in PyTorch.
 */
export class SGD extends Optimizer<SgdHyperparameters, SgdState> {
  constructor(
    params: Iterable<Tensor> | Iterable<ParamGroupInput<SgdHyperparameters>>,
    options: Partial<SgdHyperparameters> & { lr: number },
  ) {
    super('SGD', params, {
      lr: options.lr,
      momentum: options.momentum ?? 0,
      dampening: options.dampening ?? 0,
      weightDecay: options.weightDecay ?? 0,
      nesterov: options.nesterov ?? false,
    });
  }

  protected validate(group: ParamGroup<SgdHyperparameters>): void {
    if (!(group.lr >= 0)) throw new ArgumentError('SGD', `invalid learning rate ${group.lr}`);
    if (!(group.momentum >= 0))
      throw new ArgumentError('SGD', `invalid momentum ${group.momentum}`);
    if (!(group.weightDecay >= 0)) {
      throw new ArgumentError('SGD', `invalid weight decay ${group.weightDecay}`);
    }
    if (group.nesterov && (group.momentum <= 0 || group.dampening !== 0)) {
      throw new ArgumentError('SGD', 'nesterov momentum needs a momentum and zero dampening');
    }
    for (const p of group.params) {
      // The fused kernel keeps its momentum in the parameter's dtype: 16-bit state would lose the
      // update (and the WebGPU kernel refuses it), so a 16-bit model steps on an f32 master.
      if (p.dtype !== 'f32' && p.dtype !== 'f64') {
        throw new DTypeError(
          'SGD',
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
        state = { momentumBuffer: null };
        this.state.set(p, state);
      }
      let firstStep = false;
      if (group.momentum !== 0 && state.momentumBuffer === null) {
        state.momentumBuffer = keep(Tensor.empty(p.backend, p.shape, 'f32'));
        firstStep = true;
      }
      const buffer = group.momentum !== 0 ? state.momentumBuffer! : null;
      // A host step: a replay of a captured step reads the learning rate anew, and is never a
      // first step ([Note: host steps in a captured step]).
      const backend = p.backend;
      const param = p.kernel('SGD');
      const gradient = grad.kernel('SGD');
      const momentum = buffer?.kernel('SGD') ?? null;
      let first = firstStep;
      hostStep(() => {
        backend.sgd(param, gradient, momentum, {
          lr: group.lr,
          momentum: group.momentum,
          dampening: group.dampening,
          weightDecay: group.weightDecay,
          nesterov: group.nesterov,
          firstStep: first,
          gradScale,
        });
        first = false;
      });
    });
  }

  protected groupToDict(group: ParamGroup<SgdHyperparameters>): Record<string, unknown> {
    return {
      lr: group.lr,
      momentum: group.momentum,
      dampening: group.dampening,
      weight_decay: group.weightDecay,
      nesterov: group.nesterov,
      maximize: false,
      foreach: null,
    };
  }

  protected groupFromDict(dict: Record<string, unknown>): Partial<SgdHyperparameters> {
    return {
      lr: Number(dict.lr),
      momentum: Number(dict.momentum),
      dampening: Number(dict.dampening),
      weightDecay: Number(dict.weight_decay),
      nesterov: Boolean(dict.nesterov),
    };
  }

  protected stateToDict(state: SgdState): OptimizerParamState {
    return { momentum_buffer: state.momentumBuffer };
  }

  protected async stateFromDict(param: Tensor, dict: OptimizerParamState): Promise<SgdState> {
    const buffer = dict.momentum_buffer ?? null;
    return {
      momentumBuffer:
        buffer === null ? null : await stateTensorFrom('SGD.loadStateDict', param, buffer),
    };
  }
}
