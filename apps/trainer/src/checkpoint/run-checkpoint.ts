import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type {
  Backend,
  GradScalerStateDict,
  Optimizer,
  OptimizerStateDict,
  Tensor,
} from '@webshard/tensor-core';
import { encodeSafetensors } from '@webshard/tensor-core/io';
import { loadSafetensors } from '@webshard/tensor-core/node';
import type { TrainConfig } from '../config.js';
import { UsageError } from '../errors.js';
import { writeFileAtomic } from '@webshard/fsdp/checkpoint';
import { checkpointFault } from '../io/fault-points.js';
import type { EvalPoint } from '../report/html-report.js';
import type { StepRecord } from '../progress.js';
import { verifyStep } from './step-manifest.js';

/** Where a run is, kept beside its weights and optimizer state in each checkpoint (`run.json`). */
export interface RunState {
  /** The run's id ([Note: a checkpoint directory belongs to a run]). */
  runId: string;
  /** Steps completed: the run continues at this step. */
  step: number;
  strategy: TrainConfig['strategy'];
  worldSize: number;
  /** The loss scaler's state (fp16), else null. */
  scaler: GradScalerStateDict | null;
  /** The steps and evaluations so far, for the report of a resumed run. */
  history: { records: StepRecord[]; evals: EvalPoint[] };
}

/**
 * [Note: the trainer's checkpoints]
 * `--checkpoint-every N --checkpoint-dir DIR` writes `DIR/step-000N/` after every N steps: for
 * fsdp a sharded checkpoint of `@webshard/fsdp/checkpoint` (each rank its shards and optimizer
 * state, a manifest; it loads at any world size), for single and ddp rank 0's `model.safetensors`
 * (the f32 weights under PyTorch names) and `optimizer.safetensors` (AdamW's state in PyTorch's
 * layout). `run.json` (the run's id, the step, the strategy, the scaler, the history for the
 * report) and `checkpoint.json` ([Note: the step manifest]) come last, in a temporary folder that
 * is renamed into place before `DIR/latest` names it ([Note: a checkpoint directory belongs to a
 * run]), so a crash at any point leaves `latest` on a complete checkpoint. This run's two newest
 * checkpoints are kept. `--resume DIR` (or a step
 * directory) restores weights, optimizer and scaler and continues at the saved step: the batches
 * and the schedule depend only on the step, so the losses are those of a run never stopped.
 */
export const LATEST = 'latest';
export const RUN_STATE = 'run.json';

/** The step directory's name for `step`. */
export function stepDirName(step: number): string {
  return `step-${String(step).padStart(6, '0')}`;
}

/**
 * Check checkpoint `dir` whole ([Note: the step manifest]), then read its `run.json` and check it
 * against this run.
 */
export async function readRunState(dir: string, config: TrainConfig): Promise<RunState> {
  await verifyStep(dir, RUN_STATE);
  let state: RunState;
  try {
    state = JSON.parse(await readFile(join(dir, RUN_STATE), 'utf8')) as RunState;
  } catch (error) {
    throw new UsageError(`--resume ${dir}: ${RUN_STATE} is not readable JSON`, {
      option: '--resume',
      cause: error,
    });
  }
  if (!Number.isSafeInteger(state.step) || state.step < 0) {
    throw new UsageError(`--resume ${dir}: ${RUN_STATE} has no valid step`, { option: '--resume' });
  }
  const sharded = (s: string) => s === 'fsdp';
  if (sharded(state.strategy) !== sharded(config.strategy)) {
    throw new UsageError(
      `--resume ${dir}: a checkpoint of --strategy ${state.strategy}, which --strategy ${config.strategy} cannot load`,
      { option: '--resume' },
    );
  }
  if (state.step >= config.steps) {
    throw new UsageError(
      `--resume ${dir}: the checkpoint is at step ${state.step}, and --steps is ${config.steps}: it has trained all its steps; raise --steps above ${state.step} to train further`,
      { option: '--resume' },
    );
  }
  return state;
}

/** Save rank 0's full weights and optimizer state (single, ddp) into `dir`. */
export async function saveFullCheckpoint(
  dir: string,
  weights: Map<string, Tensor>,
  optimizer: Optimizer<object, object>,
): Promise<void> {
  await writeFileAtomic(
    join(dir, 'model.safetensors'),
    await encodeSafetensors(Object.fromEntries(weights), { format: 'pt' }),
    checkpointFault,
  );
  const dict = optimizer.stateDict();
  const tensors: Record<string, Tensor> = {};
  const numbers: Record<string, Record<string, number | null>> = {};
  for (const [index, state] of Object.entries(dict.state)) {
    for (const [key, value] of Object.entries(state)) {
      if (value !== null && typeof value === 'object') {
        tensors[`state.${index}.${key}`] = value;
      } else {
        numbers[index] = { ...numbers[index], [key]: value };
      }
    }
  }
  const metadata = {
    numbers: JSON.stringify(numbers),
    param_groups: JSON.stringify(dict.param_groups),
  };
  await writeFileAtomic(
    join(dir, 'optimizer.safetensors'),
    await encodeSafetensors(tensors, metadata),
    checkpointFault,
  );
}

/** Load `optimizer.safetensors` of `dir` into `optimizer` (single, ddp; every rank). */
export async function loadFullOptimizer(
  dir: string,
  optimizer: Optimizer<object, object>,
  backend: Backend,
): Promise<void> {
  const path = join(dir, 'optimizer.safetensors');
  const { tensors, metadata } = await loadSafetensors(path, { backend });
  try {
    const numbers = JSON.parse(metadata.numbers ?? '{}') as Record<string, Record<string, number>>;
    const dict: OptimizerStateDict = {
      state: {},
      param_groups: JSON.parse(metadata.param_groups ?? '[]'),
    };
    for (const [index, values] of Object.entries(numbers))
      dict.state[Number(index)] = { ...values };
    for (const [name, tensor] of Object.entries(tensors)) {
      const [, index, key] = name.split('.');
      dict.state[Number(index)] = { ...dict.state[Number(index)], [key!]: tensor };
    }
    await optimizer.loadStateDict(dict);
  } finally {
    for (const t of Object.values(tensors)) t.free();
  }
}
