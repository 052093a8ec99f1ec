import {
  type AdamHyperparameters,
  backward,
  clipGradNorm,
  type GradScaler,
  type MixedPrecision,
  mul,
  type Module,
  type Optimizer,
  type ParamGroupInput,
  type Tensor,
  tidy,
  tidyAsync,
} from '@webshard/tensor-core';

/**
 * nanoGPT's two parameter groups: weight decay on every tensor of two or more dimensions (matmul
 * weights and embeddings), none on biases and LayerNorm parameters. Takes a model or a list of
 * tensors (a `MixedPrecision`'s f32 masters).
 */
export function decayGroups(
  model: Module | readonly Tensor[],
  weightDecay: number,
): ParamGroupInput<AdamHyperparameters>[] {
  const params = Array.isArray(model) ? model : (model as Module).parameters();
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

/** What a mixed-precision step measured, and whether the loss scaler let the update through. */
export interface MixedStepResult extends StepResult {
  /** False when a gradient overflowed and the scaler skipped the update (f16). */
  stepped: boolean;
}

/**
 * One mixed-precision step (see [Note: mixed precision] in tensor-core): the model computes in
 * f16 or bf16 with f32 masters; the loss is multiplied by the scaler's scale before backward, the
 * 16-bit gradients are cast into the masters' f32 gradients, unscaled and checked for overflow,
 * clipped, and the f32 update (skipped on overflow) is cast back into the compute copies.
 * `optimizer` must hold `mixed.masterParams()`.
 */
export async function mixedPrecisionStep(
  mixed: MixedPrecision,
  optimizer: Optimizer<object, object>,
  scaler: GradScaler,
  computeLoss: () => Tensor,
  options: { clip: number },
): Promise<MixedStepResult> {
  const loss = tidy(computeLoss);
  const scaled = scaler.scale(loss);
  try {
    await backward(scaled);
    const value = await loss.item();
    mixed.gradsToMasters();
    await scaler.unscale(optimizer);
    const gradNorm = await clipGradNorm(mixed.masterParams(), options.clip);
    const stepped = await scaler.step(optimizer);
    scaler.update();
    mixed.mastersToCompute();
    mixed.zeroGrad();
    return { loss: value, gradNorm, stepped };
  } finally {
    if (scaled !== loss) scaled.free();
    loss.free();
  }
}

/**
 * How `accumulatedStep` runs in 16 bits: the loss scaler, and the f32 masters when the model's own
 * parameters are the 16-bit copies (tensor-core's `MixedPrecision`; FSDP keeps f32 shards itself).
 */
export interface MixedState {
  scaler: GradScaler;
  mixed?: MixedPrecision;
}

/** What a strategy changes in a step (see [Note: where the strategies go] in strategy/prepare.ts). */
export interface StepOptions {
  /** The global gradient-norm clip (Infinity for none). */
  clip: number;
  mixed?: MixedState;
  /** Throws, before any update, when the step's loss is refused (a non-finite loss). */
  check?: (loss: number) => void;
  /** Clip the gradients the optimizer steps on; default `clipGradNorm(params)`. */
  clipGrads?: (maxNorm: number) => Promise<number>;
  /** Run a micro-batch without reducing its gradients (every one but the last). */
  noSync?: <T>(fn: () => Promise<T>) => Promise<T>;
  /** This rank's mean loss to the mean over every rank (equal shares of the batch). */
  meanOverRanks?: (loss: number) => Promise<number>;
}

/**
 * One optimizer step over `microLosses.length` micro-batches (gradient accumulation): each
 * micro-batch's loss is divided by their count before its backward, so the gradients add up to
 * those of the mean loss over the whole batch, and the reported loss is that mean (over every rank
 * with `meanOverRanks`). Every micro-batch but the last runs inside `noSync` when given. Then clip,
 * step, clear; with `mixed`, the loss is scaled before backward and the gradients unscaled (and
 * cast into the masters) before the clip, and an overflowing step is skipped. A loss that is not
 * finite is reported before any update: `check(loss)` throws, and the step is not taken.
 */
export async function accumulatedStep(
  params: readonly Tensor[],
  optimizer: Optimizer<object, object>,
  microLosses: readonly (() => Tensor | Promise<Tensor>)[],
  options: StepOptions,
): Promise<MixedStepResult> {
  const { mixed } = options;
  const zeroGrad = () => (mixed?.mixed ? mixed.mixed.zeroGrad() : optimizer.zeroGrad());
  try {
    return await stepOnce(params, optimizer, microLosses, options, zeroGrad);
  } catch (error) {
    // A step that failed part way (a collective lost with a member of an elastic world, a loss
    // that is not finite) leaves no gradient behind: the step run again after the failure must
    // not add its gradients to the failed attempt's.
    zeroGrad();
    throw error;
  }
}

async function stepOnce(
  params: readonly Tensor[],
  optimizer: Optimizer<object, object>,
  microLosses: readonly (() => Tensor | Promise<Tensor>)[],
  options: StepOptions,
  zeroGrad: () => void,
): Promise<MixedStepResult> {
  const weight = 1 / microLosses.length;
  const { mixed } = options;
  let total = 0;
  for (const [m, computeLoss] of microLosses.entries()) {
    const microStep = async () => {
      const loss = await tidyAsync(async () => {
        const l = await computeLoss();
        return microLosses.length === 1 ? l : mul(l, weight);
      });
      const scaled = mixed === undefined ? loss : mixed.scaler.scale(loss);
      try {
        await backward(scaled);
        total += await loss.item();
      } finally {
        if (scaled !== loss) scaled.free();
        loss.free();
      }
    };
    const last = m === microLosses.length - 1;
    await (last || options.noSync === undefined ? microStep() : options.noSync(microStep));
  }
  if (options.meanOverRanks !== undefined) total = await options.meanOverRanks(total);
  options.check?.(total);
  const clipGrads = options.clipGrads ?? ((maxNorm) => clipGradNorm(params, maxNorm));
  if (mixed === undefined) {
    const gradNorm = await clipGrads(options.clip);
    optimizer.step();
    optimizer.zeroGrad();
    return { loss: total, gradNorm, stepped: true };
  }
  mixed.mixed?.gradsToMasters();
  await mixed.scaler.unscale(optimizer);
  const gradNorm = await clipGrads(options.clip);
  const stepped = await mixed.scaler.step(optimizer);
  mixed.scaler.update();
  mixed.mixed?.mastersToCompute();
  zeroGrad();
  return { loss: total, gradNorm, stepped };
}
