import { averageScalar, type ProcessGroup } from '@webshard/collectives';
import { DistributedDataParallel } from '@webshard/ddp-buckets';
import {
  autoWrap,
  clipShardedGradNorm,
  type FullyShardedDataParallel,
  fullStateDict,
  moduleClassAutoWrapPolicy,
  ShardedGradScaler,
} from '@webshard/fsdp';
import {
  type Backend,
  GPT,
  GPTBlock,
  GradScaler,
  MixedPrecision,
  type Tensor,
} from '@webshard/tensor-core';
import {
  checkpointFault,
  loadFullOptimizer,
  loadShardedCheckpoint,
  saveFullCheckpoint,
  saveShardedCheckpoint,
} from '#platform';
import type { TrainConfig } from '../config.js';
import { UsageError } from '../errors.js';
import type { MLP } from '../models/mlp.js';
import { decayGroups, type MixedState } from '../train-step.js';
import { prepareDiloco } from './diloco.js';
import { prepareOffload } from './offload.js';
import type { AnyOptimizer, PreparedModel } from './prepared-model.js';
import { shardingOptions } from './sharding.js';
import { TrainModule, type TrainOutput } from './train-module.js';

/**
 * [Note: where the strategies go]
 * The loop in run/loop.ts is one rank's; the strategy decides four things and nothing else:
 * - single: the model as it is; with 16-bit precision, tensor-core's `MixedPrecision` masters.
 * - ddp: `DistributedDataParallel` over the same model (rank 0's weights broadcast at wrap time);
 *   every rank steps the whole model on gradients averaged in buckets during backward; micro-batches
 *   but the last run in `noSync`. 16-bit precision as single (the buckets carry 16-bit gradients).
 * - fsdp: one FSDP unit per transformer block and the root for the rest (`--auto-wrap none`: the
 *   root only), each parameter sharded on its own (`flattenParameters: false`), so the optimizer
 *   keeps nanoGPT's decay groups as PyTorch's FSDP needs `use_orig_params=True` for: a flat shard
 *   would mix decayed matrices with undecayed biases. The clip reduces the norm over ranks; fp16
 *   uses `ShardedGradScaler`, bf16 needs no scaler; FSDP keeps the f32 shards.
 * - offload: `OffloadModel` streams the layers through the device from the host (offload.ts).
 * - diloco: the model as single, each rank on its own data, averaged every `--inner-steps` steps
 *   by an outer step ([Note: the diloco strategy] in diloco.ts).
 * In every multi-rank strategy the reported loss is the mean over ranks. ddp, fsdp: averaged inside
 * the step, before the update, so a non-finite loss stops every rank at the same step before its
 * averaged gradients move any replica. diloco: with the step line's all-gather, after the update
 * (its inner steps are each rank's own: a non-finite loss stops the rank that sees it).
 */
export function prepareModel(
  model: GPT | MLP,
  config: TrainConfig,
  group: ProcessGroup | null,
  computeBackend: Backend,
): PreparedModel {
  const meanOverRanks =
    group === null || group.size === 1 ? undefined : (loss: number) => averageScalar(group, loss);
  const dtype = config.precision === 'fp16' ? 'f16' : 'bf16';
  if (config.strategy === 'fsdp') return prepareFsdp(model, config, group!, computeBackend);
  if (config.strategy === 'offload') return prepareOffload(model, config, computeBackend);
  const mixed: MixedState | undefined =
    config.precision === 'fp32'
      ? undefined
      : {
          mixed: new MixedPrecision(model, { computeDType: dtype }),
          scaler: new GradScaler({ enabled: dtype === 'f16' }),
        };
  const params = mixed?.mixed?.masterParams() ?? model.parameters();
  const inner = new TrainModule(model);
  const evalForward = (input: Tensor, target: Tensor | null) => inner.call(input, target);
  const common = {
    evalForward,
    groups: decayGroups(params, config.weightDecay),
    params,
    ...(mixed === undefined ? {} : { mixed }),
    withFullStateDict: <T>(fn: (dict: Map<string, Tensor> | null) => Promise<T>) =>
      fn(group === null || group.rank === 0 ? stateDictOf(model, mixed) : null),
    async saveCheckpoint(dir: string, optimizer: AnyOptimizer) {
      if (group === null || group.rank === 0) {
        await saveFullCheckpoint(dir, stateDictOf(model, mixed), optimizer);
      }
      // Every rank waits until rank 0 has written the checkpoint.
      if (group !== null && group.size > 1) await group.barrier().wait();
    },
    loadCheckpoint: (dir: string, optimizer: AnyOptimizer) =>
      loadFullOptimizer(dir, optimizer, params[0]!.backend),
  };
  if (config.strategy === 'single') {
    return { ...common, forward: evalForward, step: {} };
  }
  if (config.strategy === 'diloco') {
    return prepareDiloco({ ...common, forward: evalForward }, config, group!);
  }
  const ddp = new DistributedDataParallel(inner, {
    group: group!,
    delayAllreduce: config.ddpAllreduce === 'auto' ? 'auto' : config.ddpAllreduce === 'delay',
    ...(config.bucketMb === null
      ? {}
      : { messageSize: Math.round((config.bucketMb * 2 ** 20) / 4) }),
  });
  return {
    ...common,
    forward: (input, target) => ddp.call(input, target),
    release: () => ddp.dispose(),
    ready: ddp.ready,
    news: ddpModeNews(ddp),
    step: {
      noSync: (fn) => ddp.noSync(fn),
      ...(meanOverRanks === undefined ? {} : { meanOverRanks }),
    },
  };
}

function prepareFsdp(
  model: GPT | MLP,
  config: TrainConfig,
  group: ProcessGroup,
  computeBackend: Backend,
): PreparedModel {
  const precision =
    config.precision === 'fp32'
      ? {}
      : ({
          mixedPrecision: true,
          computeDtype: config.precision === 'fp16' ? 'f16' : 'bf16',
        } as const);
  const options = {
    group,
    flattenParameters: false,
    ...shardingOptions(config.sharding, config.reshardAfterForward, group.size),
    ...precision,
    ...(config.bucketMb === null ? {} : { bucketCapMb: config.bucketMb }),
    limitAllGathers: config.prefetch,
    ...(config.moveParamsToCpu ? { moveParamsToCpu: true, computeBackend } : {}),
  };
  const policy = moduleClassAutoWrapPolicy(config.autoWrap === 'block' ? [GPTBlock] : []);
  const root = autoWrap(new TrainModule(model), policy, options) as FullyShardedDataParallel<
    [Tensor, (Tensor | null)?],
    Promise<TrainOutput>
  >;
  const decayed: Tensor[] = [];
  const undecayed: Tensor[] = [];
  for (const unit of root.units()) {
    for (const flat of unit.flatParameters) {
      const ranks = new Set(flat.entries.map((e) => (e.shape.length >= 2 ? 2 : 1)));
      if (ranks.size !== 1) {
        throw new Error(`fsdp: unit ${unit.unitName} mixes decayed and undecayed parameters`);
      }
      (ranks.has(2) ? decayed : undecayed).push(flat.shard);
    }
  }
  const mixed: MixedState | undefined =
    config.precision === 'fp16' ? { scaler: new ShardedGradScaler(group) } : undefined;
  const forward = (input: Tensor, target: Tensor | null) => root.call(input, target);
  return {
    forward,
    evalForward: forward,
    groups: [
      { params: decayed, weightDecay: config.weightDecay },
      { params: undecayed, weightDecay: 0 },
    ],
    params: [...decayed, ...undecayed],
    ...(mixed === undefined ? {} : { mixed }),
    step: {
      clipGrads: (maxNorm) => clipShardedGradNorm(root, maxNorm),
      noSync: (fn) => root.noSync(fn),
      meanOverRanks: (loss) => averageScalar(group, loss),
    },
    async saveCheckpoint(dir, optimizer, state) {
      // The run's id and step in fsdp's own manifest too: the trainer cross-checks them.
      await saveShardedCheckpoint(dir, {
        model: root,
        optimizer,
        step: state.step,
        extra: { runId: state.runId, step: state.step },
        fault: checkpointFault,
      });
    },
    async loadCheckpoint(dir, optimizer) {
      try {
        await loadShardedCheckpoint(dir, { model: root, optimizer });
      } catch (error) {
        if ((error as Error).name !== 'CheckpointError') throw error;
        throw new UsageError(`--resume ${dir}: ${(error as Error).message}`, {
          option: '--resume',
          cause: error,
        });
      }
    },
    async withFullStateDict(fn) {
      const dict = await fullStateDict(root, { rank0Only: true });
      try {
        if (group.rank !== 0) return await fn(null);
        // The tied weight comes once, as `transformer.wte.weight`; the model's own state dict
        // (and PyTorch's) also lists it as `lm_head.weight`.
        if (model instanceof GPT && !dict.has('lm_head.weight')) {
          dict.set('lm_head.weight', dict.get('transformer.wte.weight')!);
        }
        return await fn(dict);
      } finally {
        for (const t of new Set(dict.values())) t.free();
      }
    },
  };
}

/** The state dict to save, in f32: the masters under the model's names when training in 16 bits. */
function stateDictOf(model: GPT | MLP, mixed: MixedState | undefined): Map<string, Tensor> {
  const dict = model.stateDict();
  if (mixed?.mixed !== undefined) {
    const compute = mixed.mixed.computeParams();
    const masters = new Map(mixed.mixed.masterParams().map((m, i) => [compute[i]!, m] as const));
    for (const [k, t] of dict) dict.set(k, masters.get(t) ?? t);
  }
  return dict;
}

/** The line ddp's timed choice of all-reduce mode gets, once ([Note: choosing overlap by measurement]). */
function ddpModeNews(ddp: DistributedDataParallel): () => string | null {
  let told = false;
  return () => {
    const timings = ddp.autoTimings;
    if (told || timings === null) return null;
    told = true;
    const { delayMs, overlapMs, overlapToDelay } = timings;
    const times = `${overlapMs.toFixed(1)} ms overlapped against ${delayMs.toFixed(1)} ms delayed (forward to reduced, slowest rank, best of ${timings.trials}); overlapped / delayed, median of ${timings.trials} adjacent pairs: ${overlapToDelay.toFixed(2)}`;
    return ddp.allreduceMode === 'delay'
      ? `ddp: all-reduce at the end of backward from here on: ${times}`
      : `ddp: all-reduce overlapped with backward from here on: ${times}`;
  };
}
