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

let active: HostStepRecorder | null = null;

/** Set by `CapturedStep` while it captures; null otherwise. */
export function setHostStepRecorder(recorder: HostStepRecorder | null): void {
  active = recorder;
}

/** True while a `CapturedStep` records. */
export function isCapturing(): boolean {
  return active !== null;
}

/**
 * Run `fn` now, and again at this point of every replay of the step being captured, if one is
 * ([Note: host steps in a captured step]). Returns what `fn` returns.
 */
export function hostStep<T>(fn: () => T): T {
  return active === null ? fn() : active.hostStep(fn);
}
