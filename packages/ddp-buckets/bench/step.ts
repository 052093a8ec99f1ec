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
  /**
   * `nocomm`: bare training, no wrapper (the group, when given, is not used); `paired`: the
   * three modes interleaved (`benchPaired`).
   */
  mode: 'overlap' | 'delay' | 'auto' | 'nocomm' | 'paired';
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

/** One model (and its wrapper, unless `nocomm`) and the step the benchmark times. */
interface Runner {
  step(): Promise<void>;
  warmup: number;
  waits: number[];
  ddp: DistributedDataParallel<[Tensor], Tensor> | null;
  model: Module<[Tensor], Tensor>;
}

async function makeRunner(group: ProcessGroup | null, plan: StepPlan): Promise<Runner> {
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
  return { step, warmup, waits, ddp, model };
}

/** What a rank runs: one mode (one result), or the paired modes (in `PAIRED_MODES` order). */
export async function runPlan(group: ProcessGroup | null, plan: StepPlan): Promise<StepResult[]> {
  if (plan.mode !== 'paired') return [await benchStep(group, plan)];
  const paired = await benchPaired(group!, plan);
  return PAIRED_MODES.map((mode) => paired[mode]);
}

/** The communication alone: one all-reduce of every gradient, as delayAllreduce sends it. */
async function allReduceAlone(group: ProcessGroup | null, model: Module): Promise<number> {
  if (group === null) return 0;
  const flat = group.allocate(
    'f32',
    model.parameters().reduce((n, p) => n + p.size, 0),
  );
  const ms = await timeMedian(() => group.allReduce(flat).wait(), { warmup: 2, iterations: 9 });
  group.free(flat);
  return ms;
}

function resultOf(runner: Runner, ms: number, allReduceMs: number): StepResult {
  const { ddp, waits, warmup } = runner;
  return {
    ms,
    buckets: ddp?.bucketParameterNames().length ?? 0,
    allReduceMs,
    waitMs: waits.length > warmup ? median(waits.slice(warmup)) : 0,
    chosen: ddp?.allreduceMode ?? 'none',
  };
}

/** Median step time in ms on this rank (and how many buckets the plan made). */
export async function benchStep(group: ProcessGroup | null, plan: StepPlan): Promise<StepResult> {
  const runner = await makeRunner(group, plan);
  const ms = await timeMedian(runner.step, {
    warmup: runner.warmup,
    iterations: plan.iterations,
    maxMs: 60_000,
  });
  return resultOf(runner, ms, await allReduceAlone(group, runner.model));
}

/** The modes `benchPaired` interleaves. */
export const PAIRED_MODES = ['delay', 'overlap', 'auto'] as const;

/**
 * [Note: the ddp bench's paired steps]
 * `delayAllreduce`, overlapped and `'auto'` on one group, a model and a wrapper each, their steps
 * interleaved: after each wrapper's warm-up (for 'auto', past its choice), `plan.iterations`
 * rounds of one step of each, the order rotating every round. A burst of load from other work on
 * the shared cores then lands on every mode alike, where separate runs minutes apart compared one
 * mode's quiet minute with another's loaded one. Each mode's median step and wait, this rank's.
 */
export async function benchPaired(
  group: ProcessGroup,
  plan: Omit<StepPlan, 'mode'>,
): Promise<Record<(typeof PAIRED_MODES)[number], StepResult>> {
  const runners = [];
  for (const mode of PAIRED_MODES) runners.push(await makeRunner(group, { ...plan, mode }));
  for (const runner of runners) for (let i = 0; i < runner.warmup; i++) await runner.step();
  const times: number[][] = runners.map(() => []);
  for (let round = 0; round < plan.iterations; round++) {
    for (let k = 0; k < runners.length; k++) {
      const m = (round + k) % runners.length;
      const t0 = performance.now();
      await runners[m]!.step();
      times[m]!.push(performance.now() - t0);
    }
  }
  const allReduceMs = await allReduceAlone(group, runners[0]!.model);
  const [delay, overlap, auto] = runners.map((r, m) =>
    resultOf(r, median(times[m]!), allReduceMs),
  ) as [StepResult, StepResult, StepResult];
  return { delay, overlap, auto };
}
