import { ContextSlot } from '../async-context.js';

/**
 * [Note: host steps in a captured step]
 * A captured step ([Note: the captured step] in captured-step.ts) replays kernel calls with the
 * arguments they had at capture. Some parts of a step decide on the host, from host state that
 * moves every step or from values read back: the optimizer's step count and learning rate (its
 * bias correction and schedule), the gradient clip (it reads the norm and scales only when it is
 * over the limit). Such a part wraps itself in `hostStep(fn)`: outside a capture `fn` just runs;
 * during one, `fn` runs and is recorded as it is, and each replay calls it again at the same place
 * among the kernels, instead of replaying the kernels it made. So `fn` must reach device memory
 * through operands it took before (`tensor.kernel(op)`: storage and offset, which the captured
 * step keeps fixed), never through tensors the step frees (a gradient that `zeroGrad` frees).
 * Reads (`backend.read`) are allowed only inside a host step: a read anywhere else in a captured
 * step would be a decision the replay cannot repeat, so the capture is refused (eager instead).
 */
export interface HostStepRecorder {
  hostStep<T>(fn: () => T): T;
}

/** The recorder of the call chain that records a step ([Note: async context]); null elsewhere. */
const recorder = new ContextSlot<HostStepRecorder | null>(null);
/** Recordings in progress in this thread, whatever their chain. */
let recording = 0;

/** Run `fn` (the step being recorded) with `active` as its chain's recorder. */
export async function recordWith<T>(active: HostStepRecorder, fn: () => Promise<T>): Promise<T> {
  recording++;
  try {
    return await recorder.run(active, fn);
  } finally {
    recording--;
  }
}

/** The recorder of the current call chain, if it is recording a step. */
export function currentRecorder(): HostStepRecorder | null {
  return recorder.get();
}

/** True while a `CapturedStep` records, in any call chain of this thread. */
export function isCapturing(): boolean {
  return recording > 0;
}

/**
 * Run `fn` now, and again at this point of every replay of the step being captured, if this call
 * chain is capturing one ([Note: host steps in a captured step]). Returns what `fn` returns.
 */
export function hostStep<T>(fn: () => T): T {
  const active = recorder.get();
  return active === null ? fn() : active.hostStep(fn);
}
