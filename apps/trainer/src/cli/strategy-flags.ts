import type { TrainConfig } from '../config.js';
import { UsageError } from '../errors.js';

/*
 * The flags of one strategy given to another, and the combinations no strategy can run, refused
 * by name once the options are parsed (`parseOptions`): a flag that would be silently ignored is a
 * `UsageError` naming it and what it applies to.
 */

const FSDP_FLAGS = [
  'reshard-after-forward',
  'sharding',
  'auto-wrap',
  'move-params-to-cpu',
  'prefetch',
] as const;
const OFFLOAD_FLAGS = ['num-slices', 'num-microbatches', 'checkpoint-activation'] as const;
const DILOCO_FLAGS = [
  'inner-steps',
  'outer-lr',
  'outer-momentum',
  'outer-compression',
  'outer-density',
  'outer-fragments',
  'outer-overlap',
  'outer-merge',
  'outer-mixing',
  'outer-error-decay',
  'outer-levels',
] as const;

/** Flags of one strategy given to another, and what no transport can do, refused by name. */
export function checkStrategyFlags(
  config: TrainConfig,
  values: Record<string, string | boolean | undefined>,
): void {
  for (const flag of FSDP_FLAGS) {
    if (values[flag] !== undefined && config.strategy !== 'fsdp') {
      throw new UsageError(`--${flag} applies to --strategy fsdp, not ${config.strategy}`, {
        option: `--${flag}`,
      });
    }
  }
  for (const flag of OFFLOAD_FLAGS) {
    if (values[flag] !== undefined && config.strategy !== 'offload') {
      throw new UsageError(`--${flag} applies to --strategy offload, not ${config.strategy}`, {
        option: `--${flag}`,
      });
    }
  }
  for (const flag of DILOCO_FLAGS) {
    if (values[flag] !== undefined && config.strategy !== 'diloco') {
      throw new UsageError(`--${flag} applies to --strategy diloco, not ${config.strategy}`, {
        option: `--${flag}`,
      });
    }
  }
  if (config.strategy === 'diloco') checkDilocoFlags(config);
  if (values['outer-density'] !== undefined && config.outerCompression !== 'topk') {
    throw new UsageError(
      `--outer-density applies to --outer-compression topk, not ${config.outerCompression}`,
      { option: '--outer-density' },
    );
  }
  if (values['outer-levels'] !== undefined && config.outerCompression !== 'topk') {
    throw new UsageError(
      `--outer-levels applies to --outer-compression topk, not ${config.outerCompression}`,
      { option: '--outer-levels' },
    );
  }
  if (values['outer-error-decay'] !== undefined && config.outerCompression === 'f32') {
    throw new UsageError(
      '--outer-error-decay applies to a compression with error feedback (bf16, int8, int4, topk), not f32',
      { option: '--outer-error-decay' },
    );
  }
  const oneRank = config.strategy === 'single' || config.strategy === 'offload';
  if (config.bucketMb !== null && (oneRank || config.strategy === 'diloco')) {
    throw new UsageError(`--bucket-mb applies to --strategy ddp or fsdp, not ${config.strategy}`, {
      option: '--bucket-mb',
    });
  }
  if (values['ddp-allreduce'] !== undefined && config.strategy !== 'ddp') {
    throw new UsageError(`--ddp-allreduce applies to --strategy ddp, not ${config.strategy}`, {
      option: '--ddp-allreduce',
    });
  }
  if (values.transport !== undefined && oneRank) {
    throw new UsageError(`--transport applies to --strategy ddp or fsdp, not ${config.strategy}`, {
      option: '--transport',
    });
  }
  if (config.captureStep === true) {
    const why = captureStepRefusal(config);
    if (why !== null) {
      throw new UsageError(
        `--capture-step applies to --strategy single with one micro-batch in fp32, not ${why}`,
        { option: '--capture-step' },
      );
    }
  }
  if (values['capture-step'] === true && values['no-capture-step'] === true) {
    throw new UsageError('--capture-step and --no-capture-step contradict each other', {
      option: '--no-capture-step',
    });
  }
  if (config.strategy === 'offload' && config.precision !== 'fp32') {
    throw new UsageError(
      `--precision ${config.precision} is not available with --strategy offload: it trains in fp32`,
      { option: '--precision' },
    );
  }
}

/**
 * What `--strategy diloco` does not do yet, refused by name: 16-bit precision (its outer step
 * writes the f32 parameters a `MixedPrecision` model casts from at its own time) and checkpoints
 * (the outer state and each rank's local parameters are not in the trainer's checkpoint format).
 */
function checkDilocoFlags(config: TrainConfig): void {
  if (config.precision !== 'fp32') {
    throw new UsageError(
      `--precision ${config.precision} is not available with --strategy diloco yet: it trains in fp32`,
      { option: '--precision' },
    );
  }
  const most = Math.floor(config.innerSteps / config.outerFragments);
  if (config.outerFragments > config.innerSteps) {
    throw new UsageError(
      `--outer-fragments ${config.outerFragments} is more than --inner-steps ${config.innerSteps}: each fragment syncs once every --inner-steps steps, at its own step`,
      { option: '--outer-fragments' },
    );
  }
  if (config.outerOverlap > most) {
    throw new UsageError(
      `--outer-overlap ${config.outerOverlap} is more than --inner-steps / --outer-fragments (${most}): one fragment is on the wire at a time`,
      { option: '--outer-overlap' },
    );
  }
  for (const [flag, given] of [
    ['--checkpoint-every', config.checkpointEvery > 0],
    ['--resume', config.resume !== null],
  ] as const) {
    if (given) {
      throw new UsageError(`${flag} is not available with --strategy diloco yet`, { option: flag });
    }
  }
}

/** What keeps a run from capturing its step (the flag that does), or null. */
function captureStepRefusal(config: TrainConfig): string | null {
  if (config.strategy !== 'single') return `--strategy ${config.strategy}`;
  if (config.gradAccum !== 1) return `--grad-accum ${config.gradAccum}`;
  if (config.precision !== 'fp32') return `--precision ${config.precision}`;
  return null;
}

/**
 * [Note: capturing the step by default]
 * Without `--capture-step` or `--no-capture-step` a run captures its step where it can and where
 * it pays (issue 49): one process, one micro-batch, fp32, no `--memory-limit`, and a model of at
 * most CAPTURE_BY_DEFAULT_MAX_PARAMETERS (2^24) parameters (`run/captured-loop-step.ts`). The same
 * bits either way (tensor-core's [Note: the captured step]). Measured on the 2-core machine,
 * 2026-11-28: `pnpm train --steps 400`, the default GPT, 47 211-51 221 tokens/s captured against
 * 42 711-45 075 eager (two pairs of runs, the same final loss), peak 12.2 MiB against 8.6; GPT-2
 * 124M (`--n-layer 12 --n-head 12 --n-embd 768 --block-size 256 --tokenizer gpt2`, 5 steps) 9.8-10.2 s
 * a step against 10.1-10.3, the same losses, but a peak of 3.7 GiB against 3.1: a step of large
 * kernels gains nothing and the plan's blocks, which stay allocated between steps where the eager
 * step's go back to the pool, only add to it. For the same reason a memory limit keeps the eager
 * step. A run whose step cannot be captured (another backend, dropout) runs it eagerly and says
 * so once, as with `--capture-step`; `--no-capture-step` runs every step eagerly.
 */
export function defaultCaptureStep(config: TrainConfig): Pick<TrainConfig, 'captureStep'> {
  if (config.captureStep !== 'auto') return {};
  const can = captureStepRefusal(config) === null && config.memoryLimit === null;
  return { captureStep: can ? 'auto' : false };
}
