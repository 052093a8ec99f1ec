import {
  AdamW,
  type Backend,
  Generator,
  noGrad,
  saveSafetensors,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { BatchSampler, mulberry32, type TokenBatch } from './data/batches.js';
import { CharTokenizer } from './data/char-tokenizer.js';
import { GPT, type GPTConfig } from './models/gpt.js';
import { decayGroups, trainStep } from './train-step.js';

/**
 * The model `pnpm train` trains: nanoGPT's shape, small enough for a 2-core machine to show a
 * falling loss in well under two minutes. `vocabSize` comes from the corpus.
 */
export const DEFAULT_MODEL: Omit<GPTConfig, 'vocabSize'> = {
  blockSize: 32,
  nLayer: 2,
  nHead: 4,
  nEmbd: 64,
  dropout: 0,
  bias: true,
};

/** Options of `trainGpt`. Everything but `backend` and `text` has a default. */
export interface TrainOptions {
  backend: Backend;
  /** The training text; its characters are the vocabulary. */
  text: string;
  steps?: number;
  seed?: number;
  batchSize?: number;
  model?: Partial<Omit<GPTConfig, 'vocabSize'>>;
  /** Peak learning rate, reached after `warmupSteps` and decayed (cosine) to a tenth of it. */
  lr?: number;
  warmupSteps?: number;
  weightDecay?: number;
  clip?: number;
  /** Called after every step. */
  onStep?: (record: StepRecord) => void;
  /**
   * Stop after the step during which this many seconds of training have passed (the learning-rate
   * schedule still spans `steps`). Default: none.
   */
  maxSeconds?: number;
}

/** One step as the trainer reports it. */
export interface StepRecord {
  step: number;
  steps: number;
  loss: number;
  gradNorm: number;
  lr: number;
  /** Wall time of the step, including reading the loss back. */
  ms: number;
  tokensPerSecond: number;
}

export interface TrainResult {
  model: GPT;
  tokenizer: CharTokenizer;
  records: StepRecord[];
  /** Mean loss over a few batches of the held-out last tenth of the text, after training. */
  validationLoss: number;
}

/** nanoGPT's schedule: linear warm-up, then cosine decay to `minLr` at the last step. */
export function learningRate(step: number, steps: number, lr: number, warmup: number): number {
  const minLr = lr / 10;
  if (step < warmup) return (lr * (step + 1)) / (warmup + 1);
  const progress = steps <= warmup ? 1 : (step - warmup) / Math.max(1, steps - 1 - warmup);
  return minLr + 0.5 * (1 + Math.cos(Math.PI * Math.min(1, progress))) * (lr - minLr);
}

function batchTensors(batch: TokenBatch, backend: Backend): [Tensor, Tensor] {
  const shape = [batch.batchSize, batch.blockSize];
  return [
    tensor(batch.inputs, { backend, dtype: 'i32', shape }),
    tensor(batch.targets, { backend, dtype: 'i32', shape }),
  ];
}

/**
 * Train a character-level GPT on `text`, single process, as nanoGPT's `train.py` on
 * `shakespeare_char`: the first 90 % of the text trains, the last 10 % validates; AdamW with
 * nanoGPT's decay groups, betas (0.9, 0.95), gradient clipping at 1, warm-up and cosine decay.
 */
export async function trainGpt(options: TrainOptions): Promise<TrainResult> {
  const { backend, text } = options;
  const steps = options.steps ?? 200;
  const seed = options.seed ?? 1337;
  const batchSize = options.batchSize ?? 16;
  const lr = options.lr ?? 3e-3;
  const warmupSteps = options.warmupSteps ?? Math.min(20, Math.floor(steps / 10));
  const clip = options.clip ?? 1;
  const tokenizer = CharTokenizer.fromText(text);
  const config: GPTConfig = { ...DEFAULT_MODEL, ...options.model, vocabSize: tokenizer.vocabSize };
  const tokens = tokenizer.encode(text);
  const split = Math.floor(tokens.length * 0.9);
  const train = new BatchSampler(tokens.subarray(0, split), batchSize, config.blockSize, seed);
  const validation = new BatchSampler(
    tokens.subarray(split),
    batchSize,
    config.blockSize,
    seed + 1,
  );

  const model = new GPT(config, { backend, generator: new Generator(seed) });
  const params = model.parameters();
  const optimizer = new AdamW(decayGroups(model, options.weightDecay ?? 0.1), {
    lr,
    betas: [0.9, 0.95],
    eps: 1e-8,
  });
  const records: StepRecord[] = [];
  const started = performance.now();
  const budgetMs = (options.maxSeconds ?? Number.POSITIVE_INFINITY) * 1000;
  for (let step = 0; step < steps; step++) {
    const stepLr = learningRate(step, steps, lr, warmupSteps);
    for (const group of optimizer.paramGroups) group.lr = stepLr;
    const start = performance.now();
    const [inputs, targets] = batchTensors(train.next(), backend);
    const result = await trainStep(
      params,
      optimizer,
      () => {
        const out = model.call(inputs, targets);
        out.logits.free();
        return out.loss!;
      },
      { clip },
    );
    inputs.free();
    targets.free();
    const ms = performance.now() - start;
    const record: StepRecord = {
      step: step + 1,
      steps,
      loss: result.loss,
      gradNorm: result.gradNorm,
      lr: stepLr,
      ms,
      tokensPerSecond: (batchSize * config.blockSize * 1000) / ms,
    };
    records.push(record);
    options.onStep?.(record);
    if (performance.now() - started >= budgetMs) break;
  }
  const validationLoss = await evaluate(model, validation, 4);
  return { model, tokenizer, records, validationLoss };
}

async function evaluate(model: GPT, sampler: BatchSampler, batches: number): Promise<number> {
  let total = 0;
  for (let i = 0; i < batches; i++) {
    const [inputs, targets] = batchTensors(sampler.next(), model.wte.weight.backend);
    const out = noGrad(() => model.call(inputs, targets));
    total += await out.loss!.item();
    for (const t of [out.logits, out.loss!, inputs, targets]) t.free();
  }
  return total / batches;
}

/**
 * Sample `length` characters after `prompt` (temperature sampling from the last position's
 * logits, seeded), as nanoGPT's `sample.py`.
 */
export async function sample(
  model: GPT,
  tokenizer: CharTokenizer,
  options: { prompt?: string; length?: number; temperature?: number; seed?: number } = {},
): Promise<string> {
  const random = mulberry32(options.seed ?? 1);
  const temperature = options.temperature ?? 0.8;
  const backend = model.wte.weight.backend;
  const ids = [...tokenizer.encode(options.prompt ?? '\n')];
  const { blockSize, vocabSize } = model.config;
  for (let i = 0; i < (options.length ?? 200); i++) {
    const context = ids.slice(-blockSize);
    const input = tensor(context, { backend, dtype: 'i32', shape: [1, context.length] });
    const out = noGrad(() => model.call(input));
    const logits = await out.logits.read();
    input.free();
    out.logits.free();
    const last = logits.subarray((context.length - 1) * vocabSize, context.length * vocabSize);
    let max = Number.NEGATIVE_INFINITY;
    for (const v of last) max = Math.max(max, v);
    const weights = Array.from(last, (v) => Math.exp((v - max) / temperature));
    let u = random() * weights.reduce((a, b) => a + b, 0);
    let next = weights.length - 1;
    for (let k = 0; k < weights.length; k++) {
      u -= weights[k]!;
      if (u <= 0) {
        next = k;
        break;
      }
    }
    ids.push(next);
  }
  return tokenizer.decode(ids);
}

/**
 * Save the model as safetensors (PyTorch names; the tied `lm_head.weight` under both keys, as
 * `torch.save(model.state_dict())` holds it), with the config and vocabulary as metadata.
 */
export async function saveCheckpoint(
  path: string,
  result: TrainResult,
  extra: Record<string, string> = {},
): Promise<void> {
  const { model, tokenizer } = result;
  await saveSafetensors(path, Object.fromEntries(model.stateDict()), {
    format: 'pt',
    config: JSON.stringify(model.config),
    vocab: JSON.stringify(tokenizer.vocab.join('')),
    ...extra,
  });
}
