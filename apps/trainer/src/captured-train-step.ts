import {
  backward,
  CapturedStep,
  type CapturedStepOptions,
  clipGradNorm,
  hostStep,
  type Optimizer,
  type Tensor,
  tidyAsync,
} from '@webshard/tensor-core';
import type { StepResult } from './train-step.js';

/** `trainStep` recorded once and replayed: see `capturedTrainStep`. */
export interface CapturedTrainStep {
  /** One step on `inputs` (the batch's tensors, which the caller still owns and frees). */
  step(inputs: readonly Tensor[]): Promise<StepResult>;
  /** The captured step behind it: its status, why a capture was refused, what it did. */
  readonly captured: CapturedStep;
  dispose(): void;
}

/**
 * `trainStep` (loss in a `tidy` scope, backward, `clipGradNorm`, the optimizer step, gradients
 * cleared) as a tensor-core `CapturedStep` ([Note: the captured step] in tensor-core): eager for
 * the warm-up step, recorded at the next, replayed after while the batch keeps its shapes, with the
 * eager step's bits. `computeLoss` gets the batch's tensors (the captured step's static copies).
 * The loss is read in a host step right after backward, where `check` may refuse it before any
 * update, as `accumulatedStep` does.
 */
export function capturedTrainStep(
  params: readonly Tensor[],
  optimizer: Optimizer<object, object>,
  computeLoss: (inputs: readonly Tensor[]) => Tensor | Promise<Tensor>,
  options: { clip: number; check?: (loss: number) => void } & CapturedStepOptions,
): CapturedTrainStep {
  let lossValue = Number.NaN;
  let gradNorm = Number.NaN;
  const onTotal = (total: number) => {
    gradNorm = total;
  };
  const captured = new CapturedStep(async (inputs) => {
    const loss = await tidyAsync(async () => computeLoss(inputs));
    await backward(loss);
    await hostStep(async () => {
      lossValue = await loss.item();
      options.check?.(lossValue);
    });
    await clipGradNorm(params, options.clip, { onTotal });
    optimizer.step();
    optimizer.zeroGrad();
    return [loss];
  }, options);
  return {
    captured,
    async step(inputs) {
      try {
        await captured.run(inputs);
      } catch (error) {
        // As `accumulatedStep`: a step that failed part way (a refused loss) leaves no gradient.
        optimizer.zeroGrad();
        throw error;
      }
      return { loss: lossValue, gradNorm };
    },
    dispose: () => captured.dispose(),
  };
}
