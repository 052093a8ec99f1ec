// The benchmark's training step: a deep MLP's forward and backward (no optimizer: it costs every
// variant the same), through DistributedDataParallel or, for the no-communication baseline, bare.
import type { ProcessGroup } from '@webshard/collectives';
import {
  createCpuBackend,
  RandomGenerator,
  Linear,
  type Module,
  mseLoss,
  ReLU,
  Sequential,
  type Tensor,
  tensor,
  tidy,
} from '@webshard/tensor-core';
import { median, timeMedian } from '@webshard/bench';
import { AutoModeTrial } from '../src/auto-mode.js';
import { DistributedDataParallel } from '../src/index.js';

/** One variant of the benchmark. */
export interface StepPlan {
  /** `nocomm`: bare training, no wrapper (the group, when given, is not used). */
  mode: 'overlap' | 'delay' | 'auto' | 'nocomm';
  layers: number;
  width: number;
  rows: number;
  messageSize: number;
  iterations: number;
}

/** What a rank measured. */
export interface StepResult {
  ms: number;
  buckets: number;
  allReduceMs: number;
  /** Median time the end of backward waited for communication (the part not overlapped). */
  waitMs: number;
  /** The all-reduce mode the wrapper ran in at the end ('auto' decides in its first steps). */
  chosen: string;
}

/** Median step time in ms on this rank (and how many buckets the plan made). */
export async function benchStep(group: ProcessGroup | null, plan: StepPlan): Promise<StepResult> {
  const backend = createCpuBackend();
  const generator = new RandomGenerator(1);
  const layers: Module<[Tensor], Tensor>[] = [];
  for (let i = 0; i < plan.layers; i++) {
    layers.push(new Linear(plan.width, plan.width, { backend, generator }), new ReLU());
  }
  const model = new Sequential(...layers);
  const ddp =
    group === null || plan.mode === 'nocomm'
      ? null
      : new DistributedDataParallel<[Tensor], Tensor>(model, {
          group,
          messageSize: plan.messageSize,
          delayAllreduce: plan.mode === 'auto' ? 'auto' : plan.mode === 'delay',
        });
  await ddp?.ready;
  const x = tensor(
    Array.from({ length: plan.rows * plan.width }, (_, i) => Math.sin(i)),
    { backend, shape: [plan.rows, plan.width] },
  );
  const y = tensor(
    Array.from({ length: plan.rows * plan.width }, (_, i) => Math.cos(i)),
    { backend, shape: [plan.rows, plan.width] },
  );
  const waits: number[] = [];
  const step = async () => {
    const out = ddp === null ? model.call(x) : await ddp.call(x);
    const loss = tidy(() => mseLoss(out, y));
    await loss.backward();
    if (ddp !== null) waits.push(ddp.lastReduceWaitMs);
    loss.free();
    out.free();
  };
  // 'auto' times its two modes in the steps after the first: warm up past its choice.
  const warmup = plan.mode === 'auto' ? 2 + AutoModeTrial.STEPS : 2;
  const ms = await timeMedian(step, { warmup, iterations: plan.iterations, maxMs: 60_000 });
  // The communication alone: one all-reduce of every gradient, as delayAllreduce sends it.
  let allReduceMs = 0;
  if (group !== null) {
    const flat = group.allocate(
      'f32',
      model.parameters().reduce((n, p) => n + p.size, 0),
    );
    allReduceMs = await timeMedian(() => group.allReduce(flat).wait(), {
      warmup: 2,
      iterations: 9,
    });
    group.free(flat);
  }
  return {
    ms,
    buckets: ddp?.bucketParameterNames().length ?? 0,
    allReduceMs,
    waitMs: waits.length > warmup ? median(waits.slice(warmup)) : 0,
    chosen: ddp?.allreduceMode ?? 'none',
  };
}
