import type { ProcessGroup } from '@webshard/collectives';
import { GPT, type Tensor } from '@webshard/tensor-core';
import type { TrainConfig } from '../config.js';
import type { Dataset } from '../data/dataset.js';
import { rankMicroBatches } from '../data/global-batch.js';
import { regressionTensors, tokenTensors } from '../evaluate.js';
import type { MLP } from '../models/mlp.js';
import type { PreparedModel } from '../strategy/prepared-model.js';

/** The micro-batches' loss closures of one step, this rank's share (see [Note: deterministic batches]). */
export function microBatchLosses(
  model: GPT | MLP,
  prepared: PreparedModel,
  config: TrainConfig,
  data: Dataset | null,
  step: number,
  group: ProcessGroup | null,
): (() => Promise<Tensor>)[] {
  const rank = group?.rank ?? 0;
  const perMicro = config.batchSize / (config.worldSize * config.gradAccum);
  if (model instanceof GPT) {
    const batches = rankMicroBatches(data!.train, {
      step,
      batchSize: config.batchSize,
      blockSize: config.blockSize,
      rank,
      worldSize: config.worldSize,
      microBatches: config.gradAccum,
    });
    return batches.map((batch) => async () => {
      const [inputs, targets] = tokenTensors(batch, model);
      const out = await prepared.forward(inputs, targets);
      out.logits?.free();
      return out.loss!;
    });
  }
  const perRank = config.batchSize / config.worldSize;
  return Array.from({ length: config.gradAccum }, (_, m) => async () => {
    const [x, y] = regressionTensors(
      model,
      config.seed,
      step * config.batchSize + rank * perRank + m * perMicro,
      perMicro,
    );
    return (await prepared.forward(x, y)).loss!;
  });
}

/**
 * The batch of a one-process step with one micro-batch as tensors ([inputs, targets]), for a
 * captured step (run/captured-loop-step.ts): the tensors `microBatchLosses` makes for that step.
 */
export function stepInputs(
  model: GPT | MLP,
  config: TrainConfig,
  data: Dataset | null,
  step: number,
): Tensor[] {
  if (model instanceof GPT) {
    const [batch] = rankMicroBatches(data!.train, {
      step,
      batchSize: config.batchSize,
      blockSize: config.blockSize,
      rank: 0,
      worldSize: 1,
      microBatches: 1,
    });
    return tokenTensors(batch!, model);
  }
  return regressionTensors(model, config.seed, step * config.batchSize, config.batchSize);
}
