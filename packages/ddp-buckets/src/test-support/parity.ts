// Test helper: the parity job every transport runs. Each rank trains a small MLP with AdamW through
// DistributedDataParallel on its slice of each global batch; `trainReference` trains the same model
// in one process on the whole batch. The two must end with the same parameters.
import type { ProcessGroup } from '@webshard/collectives';
import {
  AdamW,
  type Backend,
  RandomGenerator,
  Linear,
  matmul,
  mseLoss,
  mul,
  ReLU,
  Sequential,
  type Tensor,
  tensor,
  transpose,
} from '@webshard/tensor-core';
import type { AutoTimings } from '../auto-mode.js';
import type { DistributedDataParallelOptions } from '../api.js';
import { DistributedDataParallel } from '../distributed-data-parallel.js';

/** What one parity run does. Plain data, so it travels to workers and child processes. */
export interface ParityJob {
  steps: number;
  /** Rows of each rank's micro-batch. */
  rows: number;
  /** Micro-batches per step; all but the last run inside `noSync`. Default 1. */
  accumulate?: number;
  dtype?: 'f32' | 'f16';
  options?: Omit<DistributedDataParallelOptions, 'group' | 'allreduceTriggerParams'>;
  /** Make every weight (not the biases) a trigger parameter. */
  triggerWeights?: boolean;
  /** From this step on, the first layer's bias is frozen. */
  freezeAt?: number;
  /** The last layer's bias gets no gradient (it is left out of the loss). */
  unusedBias?: boolean;
  /** This rank exits its process (or thread) in the middle of this step's backward. */
  dieAt?: { rank: number; step: number };
}

/** What a rank reports. */
export interface ParityReport {
  params: number[][];
  /** The reduced gradients of the last step. */
  grads: number[][];
  /** All-reduces this rank issued (construction's check included). */
  allReduces: number;
  /** Bucket structure (parameter names) after each step. */
  buckets: string[][][];
  /** `allreduceMode` after each step. */
  modes: string[];
  /** What `delayAllreduce: 'auto'` measured (null without it, or before it chose). */
  autoTimings: AutoTimings | null;
}

const IN = 6;
const HIDDEN = 16;
const OUT = 4;

/** The MLP; `seed` differs per rank so that only the broadcast makes the replicas equal. */
export function makeModel(backend: Backend, dtype: 'f32' | 'f16', seed: number): Sequential {
  const generator = new RandomGenerator(seed);
  const options = { backend, dtype, generator };
  const model = new Sequential(
    new Linear(IN, HIDDEN, options),
    new ReLU(),
    new Linear(HIDDEN, HIDDEN, options),
    new ReLU(),
    new Linear(HIDDEN, OUT, options),
  );
  model.nameTensors();
  return model;
}

function value(step: number, micro: number, row: number, col: number, salt: number): number {
  return Math.fround(Math.sin(step * 7.1 + micro * 3.3 + row * 1.7 + col * 0.37 + salt) * 1.5);
}

/** Rows `[first, first + count)` of micro-batch `micro` of step `step`. */
export function batch(
  backend: Backend,
  dtype: 'f32' | 'f16',
  step: number,
  micro: number,
  first: number,
  count: number,
): { x: Tensor; y: Tensor } {
  const x: number[] = [];
  const y: number[] = [];
  for (let r = first; r < first + count; r++) {
    for (let c = 0; c < IN; c++) x.push(value(step, micro, r, c, 0));
    for (let c = 0; c < OUT; c++) y.push(value(step, micro, r, c, 11));
  }
  return {
    x: tensor(x, { backend, dtype, shape: [count, IN] }),
    y: tensor(y, { backend, dtype, shape: [count, OUT] }),
  };
}

function lossOf(model: (x: Tensor) => Tensor | Promise<Tensor>, scale = 1) {
  return async (x: Tensor, y: Tensor): Promise<Tensor> => {
    const loss = mseLoss(await model(x), y);
    return scale === 1 ? loss : mul(loss, scale);
  };
}

async function readParams(model: Sequential): Promise<number[][]> {
  const out: number[][] = [];
  for (const p of model.parameters()) out.push([...(await p.read())]);
  return out;
}

async function readGrads(model: Sequential): Promise<number[][]> {
  const out: number[][] = [];
  for (const p of model.parameters()) out.push(p.grad === null ? [] : [...(await p.grad.read())]);
  return out;
}

/** AdamW keeps f32 parameters; 16-bit jobs compare gradients only (the optimizer does not step). */
function optimizerFor(model: Sequential, dtype: 'f32' | 'f16'): AdamW | null {
  return dtype === 'f32' ? new AdamW(model.parameters(), { lr: 0.01, weightDecay: 0.01 }) : null;
}

function freeze(model: Sequential): void {
  model.parameters()[1]!.requiresGrad = false;
}

/** One rank's part of the job: DDP training on rows `[rank * rows, (rank + 1) * rows)`. */
export async function trainRank(
  group: ProcessGroup,
  job: ParityJob,
  backend: Backend,
  onExit: () => never = () => process.exit(3),
): Promise<ParityReport> {
  const dtype = job.dtype ?? 'f32';
  let allReduces = 0;
  const allReduce = group.allReduce.bind(group);
  group.allReduce = (...args) => {
    allReduces++;
    return allReduce(...args);
  };
  const model = makeModel(backend, dtype, 1 + group.rank);
  if (job.unusedBias) {
    // The output layer leaves its bias out of the forward, so the bias gets no gradient.
    const head = model.children()[4] as Linear;
    head.forward = (x: Tensor) => matmul(x, transpose(head.weight, 0, 1));
  }
  const triggers = job.triggerWeights
    ? model.parameters().filter((_, i) => i % 2 === 0)
    : undefined;
  const ddp = new DistributedDataParallel<[Tensor], Tensor>(model, {
    group,
    ...job.options,
    ...(triggers === undefined ? {} : { allreduceTriggerParams: triggers }),
  });
  const optimizer = optimizerFor(model, dtype);
  const loss = lossOf((x) => ddp.call(x));
  const buckets: string[][][] = [];
  const modes: string[] = [];
  const accumulate = job.accumulate ?? 1;
  let step = 0;
  let grads: number[][] = [];
  if (job.dieAt?.rank === group.rank) {
    // The first layer's weight is among the last gradients: the later buckets are in flight.
    model.parameters()[0]!.registerPostAccumulateGradHook(() => {
      if (step === job.dieAt!.step) onExit();
    });
  }
  for (; step < job.steps; step++) {
    if (job.freezeAt === step) freeze(model);
    for (let micro = 0; micro < accumulate; micro++) {
      const { x, y } = batch(backend, dtype, step, micro, group.rank * job.rows, job.rows);
      const run = async () => {
        await (await loss(x, y)).backward();
      };
      if (micro < accumulate - 1) await ddp.noSync(run);
      else await run();
    }
    grads = await readGrads(model);
    optimizer?.step();
    model.zeroGrad({ setToNone: true });
    buckets.push(ddp.bucketParameterNames());
    modes.push(ddp.allreduceMode);
  }
  const autoTimings = ddp.autoTimings;
  return { params: await readParams(model), grads, allReduces, buckets, modes, autoTimings };
}

/** The same training in one process on every rank's rows at once. */
export async function trainReference(
  job: ParityJob,
  worldSize: number,
  backend: Backend,
): Promise<Pick<ParityReport, 'params' | 'grads'>> {
  const dtype = job.dtype ?? 'f32';
  const model = makeModel(backend, dtype, 1);
  if (job.unusedBias) {
    const head = model.children()[4] as Linear;
    head.forward = (x: Tensor) => matmul(x, transpose(head.weight, 0, 1));
  }
  const optimizer = optimizerFor(model, dtype);
  // Summed instead of averaged over ranks: the sum of every rank's mean loss.
  const loss = lossOf((x) => model.call(x), job.options?.gradientAverage === false ? worldSize : 1);
  const accumulate = job.accumulate ?? 1;
  let grads: number[][] = [];
  for (let step = 0; step < job.steps; step++) {
    if (job.freezeAt === step) freeze(model);
    for (let micro = 0; micro < accumulate; micro++) {
      const { x, y } = batch(backend, dtype, step, micro, 0, worldSize * job.rows);
      await (await loss(x, y)).backward();
    }
    grads = await readGrads(model);
    optimizer?.step();
    model.zeroGrad({ setToNone: true });
  }
  return { params: await readParams(model), grads };
}

/** The largest relative difference between two parameter lists (relative to max(|b|, 1e-2)). */
export function maxRelativeDifference(a: number[][], b: number[][]): number {
  let worst = 0;
  a.forEach((row, i) => {
    row.forEach((v, j) => {
      const w = b[i]![j]!;
      worst = Math.max(worst, Math.abs(v - w) / Math.max(Math.abs(w), 1e-2));
    });
  });
  return worst;
}
