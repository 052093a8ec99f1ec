import type { StepResult } from '../train-step.js';
import { type CapturedTrainStep, capturedTrainStep } from '../captured-train-step.js';
import { NonFiniteLossError } from '../errors.js';
import { stepInputs } from './micro-batches.js';
import type { Run } from './set-up.js';

const steps = new WeakMap<Run, { captured: CapturedTrainStep; step: number; said: boolean }>();

/**
 * Past this many parameters a run does not capture its step unless asked ([Note: capturing the
 * step by default] in `cli/strategy-flags.ts`): its step is its kernels, and the plan's blocks
 * would only add to its peak.
 */
export const CAPTURE_BY_DEFAULT_MAX_PARAMETERS = 2 ** 24;

/** Runs whose model is past CAPTURE_BY_DEFAULT_MAX_PARAMETERS, decided at their first step. */
const tooLarge = new WeakSet<Run>();

/**
 * `--capture-step`: the loop's step (index `step`, from 0) as a captured step, recorded at the
 * run's second step and replayed after ([Note: the captured step] in tensor-core); null when the
 * run does not ask for it. The options refuse it with more than one process or micro-batch or in
 * 16 bits (and leave it off there by default: [Note: capturing the step by default]); a step the
 * captured step cannot replay (another backend than the CPU or WebGPU, dropout) runs eagerly, and
 * the run says why once.
 */
export async function capturedLoopStep(run: Run, step: number): Promise<StepResult | null> {
  const { config, prepared, optimizer } = run;
  if (config.captureStep !== true && config.captureStep !== 'auto') return null;
  if (tooLarge.has(run)) return null;
  let state = steps.get(run);
  if (state === undefined) {
    const parameters = prepared.params.reduce((sum, p) => sum + p.size, 0);
    if (config.captureStep === 'auto' && parameters > CAPTURE_BY_DEFAULT_MAX_PARAMETERS) {
      tooLarge.add(run);
      return null;
    }
    const captured = capturedTrainStep(
      prepared.params,
      optimizer,
      async ([inputs, targets]) => {
        const out = await prepared.forward(inputs!, targets!);
        out.logits?.free();
        return out.loss!;
      },
      {
        clip: config.gradClip === 0 ? Number.POSITIVE_INFINITY : config.gradClip,
        check: (loss) => {
          if (!Number.isFinite(loss)) throw new NonFiniteLossError(state!.step + 1, loss);
        },
      },
    );
    state = { captured, step, said: false };
    steps.set(run, state);
  }
  state.step = step;
  const inputs = stepInputs(run.model, config, run.data, step);
  try {
    return await state.captured.step(inputs);
  } finally {
    for (const t of inputs) t.free();
    const { captured } = state.captured;
    // Asked for, the lines name the flag; by default they say how to turn it off.
    const asked = config.captureStep === true;
    const prefix = asked ? '--capture-step: ' : 'captured step: ';
    if (captured.status === 'refused' && !state.said) {
      state.said = true;
      run.say(`${prefix}the step runs eagerly: ${captured.refusal}`);
    }
    if (captured.status === 'captured' && !state.said) {
      state.said = true;
      run.say(
        `${prefix}step ${step + 1} captured (${captured.stats.tapeLength} kernel calls and host steps); later steps replay it${asked ? '' : ' (--no-capture-step runs every step eagerly)'}`,
      );
    }
  }
}
