import { cast, GPT, noGrad, type Tensor, tensor } from '@webshard/tensor-core';
import type { TokenBatch } from './data/batches.js';
import { rankMicroBatches } from './data/global-batch.js';
import { regressionBatch } from './data/synthetic.js';
import type { TrainOutput } from './strategy/train-module.js';
import type { MLP } from './models/mlp.js';

/** Batches of the held-out split that every evaluation uses, so eval losses compare. */
export const EVAL_BATCHES = 4;

/**
 * A forward for evaluation: the model itself, or the strategy's wrapper (under FSDP every rank
 * calls it with the same inputs, since each forward gathers the parameters).
 */
export type EvalForward = (input: Tensor, target: Tensor | null) => Promise<TrainOutput>;

/** Where the MLP's held-out samples start in its synthetic stream (training starts at 0). */
export const HELD_OUT_SAMPLES = 2 ** 31;

/** Host token windows as i32 tensors [B, T] on the model's backend. */
export function tokenTensors(batch: TokenBatch, model: GPT): [Tensor, Tensor] {
  const backend = model.wte.weight.backend;
  const shape = [batch.batchSize, batch.blockSize];
  return [
    tensor(batch.inputs, { backend, dtype: 'i32', shape }),
    tensor(batch.targets, { backend, dtype: 'i32', shape }),
  ];
}

/**
 * Mean loss over `EVAL_BATCHES` fixed batches of the held-out data: the first windows of the
 * held-out tokens (as steps 0, 1, ... of the batch rule), or the MLP's samples from
 * `HELD_OUT_SAMPLES` on (same teacher, inputs the training never sees).
 */
export async function evaluate(
  model: GPT | MLP,
  forward: EvalForward,
  heldOut: { tokens?: Int32Array; seed: number },
  batchSize: number,
): Promise<number> {
  let total = 0;
  for (let step = 0; step < EVAL_BATCHES; step++) {
    let inputs: Tensor;
    let targets: Tensor;
    let loss: Tensor;
    if (model instanceof GPT) {
      const [batch] = rankMicroBatches(heldOut.tokens!, {
        step,
        batchSize,
        blockSize: model.config.blockSize,
        rank: 0,
        worldSize: 1,
        microBatches: 1,
      });
      [inputs, targets] = tokenTensors(batch!, model);
      const out = await noGrad(() => forward(inputs, targets));
      out.logits?.free();
      loss = out.loss!;
    } else {
      const first = HELD_OUT_SAMPLES + step * batchSize;
      [inputs, targets] = regressionTensors(model, heldOut.seed, first, batchSize);
      loss = (await noGrad(() => forward(inputs, targets))).loss!;
    }
    total += await loss.item();
    for (const t of [loss, inputs, targets]) t.free();
  }
  return total / EVAL_BATCHES;
}

/** Synthetic regression samples `first ..` as f32 tensors on the MLP's backend. */
export function regressionTensors(
  model: MLP,
  seed: number,
  first: number,
  count: number,
): [Tensor, Tensor] {
  const { nIn, nOut } = model.config;
  const batch = regressionBatch(seed, first, count, nIn, nOut);
  const { backend, dtype } = model.fc1.weight;
  let x = tensor(batch.x, { backend, shape: [count, nIn] });
  if (dtype !== 'f32') {
    const compute = cast(x, dtype);
    x.free();
    x = compute;
  }
  return [x, tensor(batch.y, { backend, shape: [count, nOut] })];
}
