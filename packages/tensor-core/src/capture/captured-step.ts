import type { Backend, RawStorage } from '../backend/backend.js';
import { ArgumentError } from '../errors.js';
import { keep } from '../scope.js';
import { Tensor } from '../tensor.js';
import { isCapturing, recordWith } from './host-step.js';
import { KernelTape } from './kernel-tape.js';

/**
 * [Note: the captured step]
 * A training step of a small model is mostly framework: building the autograd graph, checking
 * shapes, allocating, wrapping. `CapturedStep` does what CUDA Graphs do: it runs the step once
 * eagerly while recording every kernel call it makes (forward, backward, the optimizer, clearing
 * gradients) with its operands, and replays those calls on later steps, with no graph, no checks
 * and no allocation: the step's memory is planned at capture (storage the step frees is kept by
 * the plan and handed to the step's later allocations of that size, so a replay writes exactly
 * where the capture did and nothing else ever gets that memory), and the inputs are copied into
 * static input tensors that the capture read. A replay computes the same bits as the eager step,
 * because it is the eager step's kernels in the eager step's order on the same operands.
 * What cannot be frozen runs again on the host at its place: [Note: host steps in a captured step].
 *
 * What it covers, and what it refuses (the step then runs eagerly, every time, and `refusal` says
 * why): the CPU backend, and WebGPU, where a replay queues the commands each call queued instead
 * of calling it ([Note: a captured step on WebGPU] in backend/webgpu/recorded-work.ts); one process, or a data-parallel step whose gradient all-reduce
 * runs inside a host step; not FSDP, whose hooks gather and free parameters with collectives in the
 * middle of the step and swap storage under tensors; no reads outside host steps (a `loss.item()`
 * inside the step: read the returned loss instead), no random numbers (dropout), no freeing of a
 * tensor made before the step, and no tensor made in the step that outlives it other than the
 * returned ones (an optimizer's first step makes its state: capture after `warmup` eager steps,
 * which is why that defaults to 1). Inputs that differ in count, shape, dtype or backend from the
 * captured ones run eagerly (the capture is kept for when they match again).
 *
 * The returned tensors belong to the captured step: read them before the next `run`, never free
 * them (a replay writes into them again). The recording belongs to the call chain that runs the
 * step ([Note: async context]): another chain's use of the backend meanwhile (a second rank in the
 * thread) refuses the capture, since the replay would not know that work; and one capture runs at a
 * time in a thread (a step that would capture meanwhile runs eagerly and captures later). Parameters, gradients kept between steps and optimizer
 * state must keep their storage while the step is used: loading a state dict into new tensors,
 * `setData`, or moving the model to another backend needs a new `CapturedStep`.
 */
export type CapturedStepStatus = 'warming-up' | 'captured' | 'refused' | 'disposed';

/** Options of `CapturedStep`. */
export interface CapturedStepOptions {
  /** Eager runs before the capture (an optimizer's state is made at its first step). Default 1. */
  warmup?: number;
}

/** Counts of what `run` did. */
export interface CapturedStepStats {
  /** Runs that ran the step's function without recording (warm-up, refused, other shapes). */
  eagerRuns: number;
  /** Runs that recorded the step (at most one; a refused capture counts too). */
  captures: number;
  /** Runs that replayed the tape. */
  replays: number;
  /** Kernel calls and host steps in the tape. */
  tapeLength: number;
}

/** A training step recorded once and replayed: see [Note: the captured step]. */
export class CapturedStep {
  private tape: KernelTape | null = null;
  private statics: Tensor[] = [];
  private outputs: readonly Tensor[] = [];
  /** The outputs of the last eager run, freed at the next run. */
  private eagerOutputs: readonly Tensor[] = [];
  private warmupLeft: number;
  private state: CapturedStepStatus = 'warming-up';
  /** Why the step is not captured, once a capture was refused. */
  refusal: string | null = null;
  /** What `run` did so far. */
  readonly stats: CapturedStepStats = { eagerRuns: 0, captures: 0, replays: 0, tapeLength: 0 };

  constructor(
    private readonly fn: (
      inputs: readonly Tensor[],
    ) => readonly Tensor[] | Promise<readonly Tensor[]>,
    options: CapturedStepOptions = {},
  ) {
    this.warmupLeft = options.warmup ?? 1;
    if (!(this.warmupLeft >= 0)) {
      throw new ArgumentError('CapturedStep', `warmup ${options.warmup} must be 0 or more`);
    }
  }

  /** Warming up, captured (replays when inputs match), refused (always eager), or disposed. */
  get status(): CapturedStepStatus {
    return this.state;
  }

  /**
   * One step on `inputs`: eager while warming up, captured at the first run after, replayed at
   * later runs whose inputs match the captured ones, eager otherwise. Returns the step's outputs,
   * which belong to the captured step (valid until the next `run`).
   */
  async run(inputs: readonly Tensor[]): Promise<readonly Tensor[]> {
    if (this.state === 'disposed') {
      throw new ArgumentError('CapturedStep', 'run after dispose');
    }
    this.freeEagerOutputs();
    if (this.state === 'captured' && this.matches(inputs)) {
      inputs.forEach((t, i) => {
        t.backend.copy(t.kernel('CapturedStep'), this.statics[i]!.kernel('CapturedStep'));
      });
      await this.tape!.replay();
      this.stats.replays++;
      return this.outputs;
    }
    // One recording at a time in a thread ([Note: host steps in a captured step] keeps the recorder
    // in a global): a step that would capture while another records runs eagerly and tries later.
    if (this.state === 'warming-up' && this.warmupLeft === 0 && !isCapturing()) {
      return this.capture(inputs);
    }
    if (this.state === 'warming-up' && this.warmupLeft > 0) this.warmupLeft--;
    const outputs = await this.fn(inputs);
    for (const t of outputs) keep(t);
    this.eagerOutputs = outputs;
    this.stats.eagerRuns++;
    return outputs;
  }

  private matches(inputs: readonly Tensor[]): boolean {
    if (inputs.length !== this.statics.length) return false;
    return inputs.every((t, i) => {
      const s = this.statics[i]!;
      return (
        t.backend === s.backend &&
        t.dtype === s.dtype &&
        t.rank === s.rank &&
        t.shape.every((d, k) => d === s.shape[k])
      );
    });
  }

  private async capture(inputs: readonly Tensor[]): Promise<readonly Tensor[]> {
    const backend = inputs[0]?.backend;
    const reason =
      backend === undefined
        ? 'a step without tensor inputs'
        : backend.kind !== 'cpu' && backend.workRecorder === undefined
          ? `the ${backend.kind} backend (it cannot record its queued work)`
          : inputs.some((t) => t.backend !== backend)
            ? 'inputs on two backends'
            : null;
    if (reason !== null) return this.refuseAndRun(reason, inputs);
    this.statics = inputs.map((t) => {
      const s = keep(Tensor.empty(t.backend, t.shape, t.dtype));
      t.backend.copy(t.kernel('CapturedStep'), s.kernel('CapturedStep'));
      return s;
    });
    const tape = new KernelTape(backend as Backend);
    tape.install();
    let outputs: readonly Tensor[];
    try {
      outputs = await recordWith(tape, async () => this.fn(this.statics));
    } catch (error) {
      // A step that failed while recording leaves no plan: the next run captures again.
      tape.uninstall();
      tape.releasePlan();
      for (const s of this.statics) s.free();
      this.statics = [];
      throw error;
    } finally {
      tape.uninstall();
    }
    for (const t of outputs) keep(t);
    this.stats.captures++;
    const kept = new Set<RawStorage>(outputs.map((t) => t.kernel('CapturedStep').storage));
    const escaped = tape.escaped(kept);
    if (escaped > 0) {
      tape.refuse(
        `the step made ${escaped} tensor(s) that outlive it besides its outputs (an optimizer's state at its first step? warm up first)`,
      );
    }
    if (tape.refusal !== null) {
      tape.releasePlan();
      for (const s of this.statics) s.free();
      this.statics = [];
      this.refusal = tape.refusal;
      this.state = 'refused';
      this.eagerOutputs = outputs;
      return outputs;
    }
    this.tape = tape;
    this.outputs = outputs;
    this.stats.tapeLength = tape.entries.length;
    this.state = 'captured';
    return outputs;
  }

  private async refuseAndRun(reason: string, inputs: readonly Tensor[]) {
    this.refusal = reason;
    this.state = 'refused';
    return this.run(inputs);
  }

  private freeEagerOutputs(): void {
    for (const t of this.eagerOutputs) if (!t.isFreed) t.free();
    this.eagerOutputs = [];
  }

  /** Free the plan, the static inputs and the outputs; `run` throws afterwards. */
  dispose(): void {
    this.freeEagerOutputs();
    for (const t of [...this.outputs, ...this.statics]) if (!t.isFreed) t.free();
    this.outputs = [];
    this.statics = [];
    this.tape?.releasePlan();
    this.tape = null;
    this.state = 'disposed';
  }
}
