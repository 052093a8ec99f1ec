import { DilocoArgumentError } from './errors.js';

/** Hyperparameters of the outer optimizer (the DiLoCo paper's defaults: 0.7, 0.9, Nesterov). */
export interface OuterOptimizerOptions {
  /** Outer learning rate. Default 0.7. */
  lr?: number;
  /** Momentum. Default 0.9; 0 is plain SGD. */
  momentum?: number;
  /** Nesterov momentum. Default true (false when momentum is 0). */
  nesterov?: boolean;
}

/** The outer optimizer's state, for state dicts: its step count and momentum buffer. */
export interface OuterOptimizerState {
  readonly step: number;
  /** Null before the first step with momentum. */
  readonly momentumBuffer: Float32Array | null;
}

/** The paper's outer learning rate. */
export const DEFAULT_OUTER_LR = 0.7;
/** The paper's outer momentum. */
export const DEFAULT_OUTER_MOMENTUM = 0.9;

/**
 * SGD with (Nesterov) momentum on a flat f32 host copy of the global parameters, with PyTorch's
 * `torch.optim.SGD` formulas (dampening 0, no weight decay), as DiLoCo's outer step: for the
 * averaged pseudo-gradient g (global - local), b = g on the first step and b = momentum b + g
 * after; d = nesterov ? g + momentum b : b; global -= lr d. Every rank steps the same bits from the
 * same averaged g, so the global copies stay equal without a broadcast.
 */
export class OuterOptimizer {
  readonly lr: number;
  readonly momentum: number;
  readonly nesterov: boolean;
  private buffer: Float32Array | null = null;
  private steps = 0;

  constructor(options: OuterOptimizerOptions = {}, rank = -1) {
    const fail = (option: string, detail: string): never => {
      throw new DilocoArgumentError({ op: 'OuterOptimizer', rank }, option, detail);
    };
    const lr = options.lr ?? DEFAULT_OUTER_LR;
    const momentum = options.momentum ?? DEFAULT_OUTER_MOMENTUM;
    if (!Number.isFinite(lr) || lr <= 0)
      fail('outerLr', `the outer lr must be a positive number, got ${lr}`);
    if (!Number.isFinite(momentum) || momentum < 0 || momentum >= 1) {
      fail('outerMomentum', `the outer momentum must be in [0, 1), got ${momentum}`);
    }
    const nesterov = options.nesterov ?? momentum > 0;
    if (nesterov && momentum === 0) fail('nesterov', 'Nesterov momentum needs a momentum above 0');
    this.lr = lr;
    this.momentum = momentum;
    this.nesterov = nesterov;
  }

  /** Outer steps taken. */
  get step(): number {
    return this.steps;
  }

  /** `params -= lr x direction(grad)`, in place; `grad` is the averaged pseudo-gradient. */
  apply(params: Float32Array, grad: Float32Array): void {
    this.buffer = this.applySlice(params, grad, this.buffer);
    this.steps++;
  }

  /**
   * The outer step's arithmetic on one slice, with that slice's momentum `buffer` held by the
   * caller (null before the first step with momentum): returns the slice's new buffer (null
   * without momentum). Counts no step (`countStep`). Element by element the same operations as
   * `apply`, so a step taken slice by slice gives the same bits ([Note: the outer state in a
   * store]).
   */
  applySlice(
    params: Float32Array,
    grad: Float32Array,
    buffer: Float32Array | null,
  ): Float32Array | null {
    const { lr, momentum } = this;
    if (momentum === 0) {
      for (let i = 0; i < params.length; i++) params[i]! -= lr * grad[i]!;
      return null;
    }
    if (buffer === null) {
      const b = grad.slice();
      this.update(params, grad, b);
      return b;
    }
    for (let i = 0; i < buffer.length; i++) buffer[i] = momentum * buffer[i]! + grad[i]!;
    this.update(params, grad, buffer);
    return buffer;
  }

  /** One outer step taken slice by slice (`applySlice`) is over. */
  countStep(): void {
    this.steps++;
  }

  private update(params: Float32Array, grad: Float32Array, b: Float32Array): void {
    const { lr, momentum } = this;
    if (this.nesterov) {
      for (let i = 0; i < params.length; i++) params[i]! -= lr * (grad[i]! + momentum * b[i]!);
    } else {
      for (let i = 0; i < params.length; i++) params[i]! -= lr * b[i]!;
    }
  }

  /** The state (a copy). */
  stateDict(): OuterOptimizerState {
    return { step: this.steps, momentumBuffer: this.buffer?.slice() ?? null };
  }

  /** Load a state from `stateDict` (the buffer's length is checked by the caller). */
  loadStateDict(state: OuterOptimizerState): void {
    this.steps = state.step;
    this.buffer = state.momentumBuffer?.slice() ?? null;
  }
}
