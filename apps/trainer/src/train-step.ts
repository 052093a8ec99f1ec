import {
  type AdamHyperparameters,
  backward,
  clipGradNorm,
  type Module,
  type Optimizer,
  type ParamGroupInput,
  type Tensor,
  tidy,
} from '@webshard/tensor-core';

/**
 * nanoGPT's two parameter groups: weight decay on every tensor of two or more dimensions (matmul
 * weights and embeddings), none on biases and LayerNorm parameters.
 */
export function decayGroups(
  model: Module,
  weightDecay: number,
): ParamGroupInput<AdamHyperparameters>[] {
  const params = model.parameters();
  return [
    { params: params.filter((p) => p.rank >= 2), weightDecay },
    { params: params.filter((p) => p.rank < 2), weightDecay: 0 },
  ];
}

/** What one training step measured. */
export interface StepResult {
  /** The loss before the update. */
  loss: number;
  /** The total gradient 2-norm before clipping. */
  gradNorm: number;
}

/**
 * One optimization step, as nanoGPT's loop: the loss (built inside a `tidy` scope so the forward's
 * intermediates are released once autograd has what it saved), backward, `clipGradNorm`, the
 * optimizer step, and gradients cleared.
 */
export async function trainStep(
  params: readonly Tensor[],
  optimizer: Optimizer<object, object>,
  computeLoss: () => Tensor,
  options: { clip: number },
): Promise<StepResult> {
  const loss = tidy(computeLoss);
  try {
    await backward(loss);
    const value = await loss.item();
    const gradNorm = await clipGradNorm(params, options.clip);
    optimizer.step();
    optimizer.zeroGrad();
    return { loss: value, gradNorm };
  } finally {
    loss.free();
  }
}
