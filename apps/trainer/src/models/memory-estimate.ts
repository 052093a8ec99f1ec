import { UsageError } from '../errors.js';
import { formatBytes } from '../progress.js';
import { MLP_IN, MLP_OUT } from './build-model.js';
import type { TrainConfig } from '../config.js';
import { shardCount } from '../strategy/sharding.js';

/**
 * [Note: the memory estimate]
 * A rough upper estimate of a run's device bytes, checked against `--memory-limit` and the host's
 * free memory before anything is allocated (so `--batch-size 100000000` is refused instead of
 * exhausting the machine). Parameters, gradients and AdamW's two moments take 16 bytes per
 * parameter in f32 (plus the 2-byte compute copy and its gradient in 16-bit precision).
 * Activations follow Korthikanti et al. (2022) for one transformer layer, about
 * b T C (34 + 5 nHead T / C) bytes in 16 bits, doubled for f32, per micro-batch of b sequences;
 * the logits, their softmax and their gradient add 3 b T V elements. Host batches add 8 bytes per
 * token of the global batch. FSDP shards the 16 bytes (and the masters) over its ranks (a node's
 * with `--sharding hybrid`, none with `none`), so its floor is 16P/N; the units it holds in full
 * come on top (`gatheredBytes`): the root's (the tied embedding and the rest outside the blocks)
 * for the whole step, 1 + `--prefetch` blocks at a time (the one computing and those prefetched:
 * two by default), and the
 * largest unit's unsharded gradient twice (the reduce-scatter's input is a pre-divided copy of
 * it: fairscale's predivide factor is 2 at 2 to 7 ranks); with `--sharding grad-op` every
 * unit's full parameters after forward; and the gradients waiting in its reduce-scatter bucket
 * (`bucketedBytes`: with fairscale's 25 MiB buckets every gradient of a small model waits for the
 * end of backward, which doubled the peak of memory-limit.test.ts's GPT, 7.3 to 13.8 MB, while the
 * estimate without them stayed 7.6 MB). The estimate is one rank's. The emulated limit applies to
 * the caching allocator's size classes and to FSDP's registered memory ([Note: the limit covers
 * external memory] in tensor-core). The estimate is not a promise that the run fits.
 */
export function estimateBytes(config: TrainConfig, vocabSize: number): number {
  const microBatch = config.batchSize / (config.worldSize * config.gradAccum);
  const elementBytes = config.precision === 'fp32' ? 4 : 2;
  const masterExtra = config.precision === 'fp32' ? 0 : 4;
  if (config.model === 'mlp') {
    const params = MLP_IN * config.nEmbd + config.nEmbd + config.nEmbd * MLP_OUT + MLP_OUT;
    const activations = microBatch * (MLP_IN + 3 * config.nEmbd + 2 * MLP_OUT) * elementBytes;
    return params * (16 + masterExtra) + activations;
  }
  const { nLayer, nEmbd: c, nHead, blockSize: t } = config;
  const params = vocabSize * c + t * c + nLayer * (12 * c * c + 13 * c) + 2 * c;
  const perLayer = microBatch * t * c * (34 + (5 * nHead * t) / c) * (elementBytes / 2);
  const logits = 3 * microBatch * t * vocabSize * 4;
  const hostBatch = 8 * config.batchSize * t;
  const shards = config.strategy === 'fsdp' ? shardCount(config.sharding, config.worldSize) : 1;
  const block = 12 * c * c + 13 * c;
  const root = params - nLayer * block;
  const gathered =
    shards === 1
      ? 0
      : gatheredBytes(config, params, root, block, elementBytes) +
        bucketedBytes(config, root, block, shards, elementBytes);
  return (params * (16 + masterExtra)) / shards + gathered + nLayer * perLayer + logits + hostBatch;
}

/**
 * FSDP's gradients waiting in its reduce-scatter bucket ([Note: reduce-scatter buckets] in fsdp):
 * a unit whose shard is smaller than the bucket (`--bucket-mb`, default fairscale's 25 MiB) is not
 * reduced on its own but waits, its gradient and its pre-divided copy held, until the next would
 * overflow the bucket or backward ends. The most that waits at once, the units taken in backward's
 * order (the blocks, then the root's).
 */
function bucketedBytes(
  config: TrainConfig,
  root: number,
  block: number,
  shards: number,
  elementBytes: number,
): number {
  const capacity = (config.bucketMb ?? 25) * 2 ** 20;
  let fill = 0;
  let waiting = 0;
  let most = 0;
  for (const unit of [...Array<number>(config.nLayer).fill(block), root]) {
    const shardBytes = Math.ceil(unit / shards) * elementBytes;
    if (shardBytes >= capacity) continue;
    if (fill > 0 && fill + shardBytes > capacity) {
      fill = 0;
      waiting = 0;
    }
    fill += shardBytes;
    waiting += 2 * unit * elementBytes;
    most = Math.max(most, waiting);
  }
  return most;
}

/**
 * FSDP's full parameters and gradient on top of its shards ([Note: the memory estimate]): the
 * trainer wraps each block as a unit and the root holds the rest (`root` parameters).
 */
function gatheredBytes(
  config: TrainConfig,
  params: number,
  root: number,
  block: number,
  elementBytes: number,
): number {
  const full = config.sharding === 'grad-op' ? params : root + (1 + config.prefetch) * block;
  return (full + 2 * Math.max(root, block)) * elementBytes;
}

/** Refuse (a `UsageError`) a run whose estimate passes `--memory-limit` or `freeHostBytes`. */
export function checkMemory(config: TrainConfig, vocabSize: number, freeHostBytes: number): void {
  const estimate = estimateBytes(config, vocabSize);
  const needs = `the run needs about ${estimate} bytes (${formatBytes(estimate)})`;
  const remedy = 'lower --batch-size or raise --grad-accum';
  // Offload streams the model through the device: its own check refuses a layer too large for it.
  if (
    config.memoryLimit !== null &&
    estimate > config.memoryLimit &&
    config.strategy !== 'offload'
  ) {
    throw new UsageError(`${needs}, more than --memory-limit ${config.memoryLimit}: ${remedy}`, {
      option: '--memory-limit',
    });
  }
  if (estimate > freeHostBytes) {
    throw new UsageError(
      `${needs}, more than the host's ${freeHostBytes} free bytes (${formatBytes(freeHostBytes)}): ${remedy}`,
      { option: '--batch-size' },
    );
  }
}
