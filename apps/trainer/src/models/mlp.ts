import {
  type Backend,
  cast,
  GELU,
  type RandomGenerator,
  Linear,
  Module,
  mseLoss,
  type Tensor,
  tidy,
} from '@webshard/tensor-core';

/** The sizes of the two-layer MLP. */
export interface MLPConfig {
  nIn: number;
  nHidden: number;
  nOut: number;
}

/**
 * Two Linears with an exact GELU between them, `fc1` and `fc2` as in the PyTorch fixture
 * (`fc1.weight`, `fc1.bias`, `fc2.weight`, `fc2.bias`). Initialized as `torch.nn.Linear`.
 */
export class MLP extends Module<[Tensor], Tensor> {
  readonly fc1: Linear;
  readonly gelu = new GELU();
  readonly fc2: Linear;

  constructor(
    readonly config: MLPConfig,
    options: { backend: Backend; generator?: RandomGenerator },
  ) {
    super();
    this.fc1 = this.registerModule('fc1', new Linear(config.nIn, config.nHidden, options));
    this.fc2 = this.registerModule('fc2', new Linear(config.nHidden, config.nOut, options));
    this.nameTensors();
  }

  forward(x: Tensor): Tensor {
    return tidy(() => this.fc2.call(this.gelu.call(this.fc1.call(x))));
  }

  /**
   * Mean squared error of the output against `target`, the fixture's loss. A 16-bit output (mixed
   * precision) is cast to the target's dtype first, as PyTorch's autocast runs `mse_loss` in f32:
   * the loss and its gradient's start are then computed in f32, and only the layers run in 16 bits.
   */
  loss(x: Tensor, target: Tensor): Tensor {
    return tidy(() => this.lossOf(this.call(x), target));
  }

  /** `loss` of an output already computed (by `OffloadModel`, layer by layer). */
  lossOf(out: Tensor, target: Tensor): Tensor {
    return tidy(() => mseLoss(out.dtype === target.dtype ? out : cast(out, target.dtype), target));
  }
}
