// The toy model of the elastic tests: least squares toward a target that depends on the step and
// the sample, so every sample of every step moves the parameters differently.

/** Samples in one global batch, whatever the world size. */
export const GLOBAL_BATCH = 12;

/** What the test tells each member worker. */
export interface MemberData {
  url: string;
  backend: 'tcp' | 'ws';
  size: number;
  steps: number;
  lr: number;
  /** Liveness tests: the member freezes its thread (Atomics.wait) on `{ freeze: true }` until
   * the test stores 1 in word 0 of this buffer and notifies. */
  freezeWord?: SharedArrayBuffer;
  /** Liveness tests: each step blocks the thread this long (a slow laptop's synchronous step). */
  blockMs?: number;
  /** Liveness tests: each step also sleeps this long with the event loop free. */
  sleepMs?: number;
  /** How long the member trains on without a coordinator (`coordinatorTimeoutMs`). */
  coordinatorTimeoutMs?: number;
}

export type MemberReport =
  | {
      kind: 'state';
      id: number;
      epoch: number;
      rank: number;
      worldSize: number;
      left: readonly number[];
      joined: readonly number[];
      step: number;
      params: Float32Array;
      rejoined: boolean;
    }
  | { kind: 'error'; id: number; step: number; code: string; message: string }
  | { kind: 'gate'; id: number; step: number }
  | { kind: 'done'; id: number; epoch: number; step: number; params: Float32Array };

/** Adds the gradient of sample `sample` of step `step` (0.5 |p - target|^2) into `grad`. */
export function sampleGradient(
  params: Float32Array,
  step: number,
  sample: number,
  grad: Float32Array,
): void {
  const global = step * GLOBAL_BATCH + sample;
  for (let j = 0; j < params.length; j++) {
    grad[j]! += params[j]! - Math.sin(0.01 * (j + 1) * (global + 1));
  }
}

/** The same training on one process, never interrupted: the reference. */
export function referenceRun(data: MemberData, firstId = 0): Float32Array {
  const params = new Float32Array(data.size).map((_, j) => (firstId + 1) * 0.5 + j * 1e-3);
  for (let step = 0; step < data.steps; step++) {
    const grad = new Float32Array(data.size);
    for (let i = 0; i < GLOBAL_BATCH; i++) sampleGradient(params, step, i, grad);
    for (let j = 0; j < params.length; j++) params[j]! -= (data.lr * grad[j]!) / GLOBAL_BATCH;
  }
  return params;
}
