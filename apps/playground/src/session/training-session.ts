import type { Backend, CapturedStepStatus, Tensor } from '@webshard/tensor-core';
import { AdamW, RandomGenerator } from '@webshard/tensor-core';
import {
  type CapturedTrainStep,
  capturedTrainStep,
  type Dataset,
  datasetFromBytes,
  decayGroups,
  type EvalForward,
  evaluate,
  GPT,
  learningRate,
  rankMicroBatches,
  sample,
  tokenTensors,
} from '@webshard/trainer/browser';
import type { SessionSettings } from './settings.js';

/** One step of a session, as the page plots it. */
export interface StepPoint {
  step: number;
  loss: number;
  gradNorm: number;
  lr: number;
  ms: number;
  tokensPerSecond: number;
  /** The backend's allocator: bytes in use now, and the most since the session began. */
  allocatedBytes: number;
  peakAllocatedBytes: number;
}

/**
 * A GPT trained on one text in a page, a step at a time: the trainer's model, batches, AdamW with
 * nanoGPT's decay groups, clipping and cosine schedule ([Note: the playground's loop]), so its
 * losses are `webshard-train`'s for the same settings. Its step is captured at the second step and
 * replayed after, as the trainer's default run does (the trainer's [Note: capturing the step by
 * default]): the same bits, less time outside the kernels. It knows nothing of workers or the DOM,
 * so Node runs it in tests as the page's worker does.
 */
export class TrainingSession {
  private constructor(
    readonly settings: SessionSettings,
    readonly backend: Backend,
    readonly data: Dataset,
    readonly model: GPT,
    private readonly optimizer: AdamW,
    public stepsDone = 0,
  ) {}

  /** The step, recorded once and replayed (made at the first step). */
  private captured: CapturedTrainStep | null = null;

  /**
   * A session on `backend` over the text `bytes` (named `name`, for messages): characters as
   * tokens (bytes when not UTF-8), the first 90 % to train on, the rest held out.
   */
  static create(
    bytes: Uint8Array,
    name: string,
    settings: SessionSettings,
    backend: Backend,
  ): TrainingSession {
    const data = datasetFromBytes(bytes, name, settings.blockSize);
    const model = new GPT(
      {
        vocabSize: data.vocabSize,
        blockSize: settings.blockSize,
        nLayer: settings.nLayer,
        nHead: settings.nHead,
        nEmbd: settings.nEmbd,
        dropout: 0,
        bias: true,
      },
      { backend, generator: new RandomGenerator(settings.seed) },
    );
    // The trainer's defaults (`webshard-train`): AdamW(0.9, 0.95), weight decay 0.1 on matrices.
    const optimizer = new AdamW(decayGroups(model, 0.1), {
      lr: settings.lr,
      betas: [0.9, 0.95],
      eps: 1e-8,
    });
    return new TrainingSession(settings, backend, data, model, optimizer);
  }

  /** Parameters of the model. */
  get parameterCount(): number {
    return this.model.parameters().reduce((n, p) => n + p.size, 0);
  }

  /** The captured step's status ([Note: the captured step]); 'eager' before the first step. */
  get captureStatus(): CapturedStepStatus | 'eager' {
    return this.captured?.captured.status ?? 'eager';
  }

  /** Whether the session has taken its `steps`. */
  get finished(): boolean {
    return this.stepsDone >= this.settings.steps;
  }

  /** One optimizer step on the next batch. */
  async step(): Promise<StepPoint> {
    const { settings, model, optimizer, backend } = this;
    const lr = learningRate(this.stepsDone, settings.steps, settings.lr, settings.warmupSteps);
    for (const group of optimizer.paramGroups) group.lr = lr;
    // The trainer's batches ([Note: deterministic batches]): step k of the page is step k of
    // `webshard-train` on the same text and seed.
    const [batch] = rankMicroBatches(this.data.train, {
      step: this.stepsDone,
      batchSize: settings.batchSize,
      blockSize: settings.blockSize,
      rank: 0,
      worldSize: 1,
      microBatches: 1,
    });
    const [inputs, targets] = tokenTensors(batch!, model);
    const started = performance.now();
    try {
      this.captured ??= capturedTrainStep(
        model.parameters(),
        optimizer,
        ([x, y]) => {
          const out = model.call(x!, y!);
          out.logits.free();
          return out.loss as Tensor;
        },
        { clip: 1 },
      );
      const result = await this.captured.step([inputs, targets]);
      const ms = performance.now() - started;
      this.stepsDone++;
      const memory = backend.memoryStats();
      return {
        step: this.stepsDone,
        loss: result.loss,
        gradNorm: result.gradNorm,
        lr,
        ms,
        tokensPerSecond: (settings.batchSize * settings.blockSize * 1000) / ms,
        allocatedBytes: memory.allocated,
        peakAllocatedBytes: memory.peakAllocated,
      };
    } finally {
      inputs.free();
      targets.free();
    }
  }

  /** The mean loss over the trainer's fixed held-out batches. */
  heldOutLoss(): Promise<number> {
    return evaluate(
      this.model,
      this.forward,
      { tokens: this.data.validation, seed: this.settings.seed },
      Math.min(this.settings.batchSize, 16),
    );
  }

  /** `length` characters sampled after a newline (the same seed each time, so samples compare). */
  sample(length: number): Promise<string> {
    return sample(this.model, this.forward, this.data.decoder, {
      length,
      seed: this.settings.seed,
    });
  }

  /** Frees the model's tensors, the optimizer's state and the captured step; the backend stays. */
  release(): void {
    this.captured?.dispose();
    this.captured = null;
    for (const state of this.optimizer.state.values()) {
      state.expAvg.free();
      state.expAvgSq.free();
    }
    for (const t of [...this.model.parameters(), ...this.model.buffers()]) t.free();
  }

  /** Frees the model, the optimizer's state and the backend. */
  dispose(): void {
    this.release();
    this.backend.dispose();
  }

  private readonly forward: EvalForward = async (input, target) =>
    this.model.call(input, target ?? undefined);
}
