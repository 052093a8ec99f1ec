import type { StepResult } from '../train-step.js';
import { type CapturedTrainStep, capturedTrainStep } from '../captured-train-step.js';
import { NonFiniteLossError } from '../errors.js';
import { stepInputs } from './micro-batches.js';
import type { Run } from './set-up.js';

const steps = new WeakMap<Run, { captured: CapturedTrainStep; step: number; said: boolean }>();

/**
 * `--capture-step`: the loop's step (index `step`, from 0) as a captured step, recorded at the
 * run's second step and replayed after ([Note: the captured step] in tensor-core); null when the
 * run does not ask for it. The options refuse it with more than one process or micro-batch or in
 * 16 bits; a step the captured step cannot replay (another backend than the CPU, dropout) runs
 * eagerly, and the run says why once.
 */
export async function capturedLoopStep(run: Run, step: number): Promise<StepResult | null> {
  const { config, prepared, optimizer } = run;
  if (config.captureStep !== true) return null;
  let state = steps.get(run);
  if (state === undefined) {
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
    if (captured.status === 'refused' && !state.said) {
      state.said = true;
      run.say(`--capture-step: the step runs eagerly: ${captured.refusal}`);
    }
    if (captured.status === 'captured' && !state.said) {
      state.said = true;
      run.say(
        `--capture-step: step ${step + 1} captured (${captured.stats.tapeLength} kernel calls and host steps); later steps replay it`,
      );
    }
  }
}
