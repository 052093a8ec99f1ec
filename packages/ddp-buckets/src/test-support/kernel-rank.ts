// A rank of the progress tests (worker-progress.test.ts, progress-turns.test.ts), in its own
// process: joins over tcp with its communication on the thread or on a worker (argv[2]), trains
// two steps of a model of `kernels` + 1 layers (argv[4], default 1) through
// DistributedDataParallel, the second with a kernel of `busyMs` (argv[3]) that never yields
// between every two layers of backward, and prints what it saw as one JSON line.
import { initProcessGroup, type Work, WorkerGroup } from '@webshard/collectives';
import {
  createCpuBackend,
  Linear,
  Module,
  mseLoss,
  mul,
  RandomGenerator,
  ReLU,
  Sequential,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { DistributedDataParallel } from '../index.js';

/** What a rank reports (times on `performance.timeOrigin + performance.now()`'s clock). */
export interface KernelRankReport {
  readonly rank: number;
  readonly progress: string;
  /** The all-reduces issued in the timed backward before its kernel began. */
  readonly before: { issuedAt: number; completedAt: number; fromWorker: boolean }[];
  /** The first kernel's start and the last one's end. */
  readonly kernelStart: number;
  readonly kernelEnd: number;
  /** Every kernel of the timed backward, in the order they ran. */
  readonly kernels: { start: number; end: number }[];
  /** The reduced gradient of the last layer's weight: its first elements. */
  readonly grad: number[];
}

const now = () => performance.timeOrigin + performance.now();

/** Spins this thread for `ms`: no await, no yield. */
function busyFor(ms: number): void {
  const end = performance.now() + ms;
  let x = 0;
  while (performance.now() < end) x += Math.sqrt(x + 1);
  if (x < 0) throw new Error('unreachable');
}

/**
 * The identity whose input's gradient hook runs a kernel: the engine runs it after the layer
 * above's backward and its weights' accumulation (so after their bucket went), before the layer
 * below's backward.
 */
class SlowBackward extends Module<[Tensor], Tensor> {
  busyMs = 0;
  kernel: { start: number; end: number } | null = null;
  forward(x: Tensor): Tensor {
    const ms = this.busyMs;
    if (ms > 0 && x.requiresGrad) {
      x.registerHook(() => {
        const start = now();
        busyFor(ms);
        this.kernel = { start, end: now() };
        return undefined;
      });
    }
    // A new tensor (a recorded op), not `x` itself: Sequential frees what a module returned once
    // the next one used it.
    return mul(x, 1);
  }
}

const progress = process.argv[2] === 'worker' ? 'worker' : 'thread';
const busyMs = Number(process.argv[3] ?? '1200');
const kernels = Number(process.argv[4] ?? '1');
const group = await initProcessGroup({ backend: 'tcp', timeoutMs: 30_000, progress });
const backend = createCpuBackend();
const width = 512;
const generator = new RandomGenerator(7);
const slows = Array.from({ length: kernels }, () => new SlowBackward());
const model = new Sequential(
  new Linear(width, width, { backend, generator }),
  ...slows.flatMap((slow) => [new ReLU(), slow, new Linear(width, width, { backend, generator })]),
);
// One layer a bucket: the last layer's bucket goes before the first kernel, the first's after the
// last.
const ddp = new DistributedDataParallel<[Tensor], Tensor>(model, {
  group,
  messageSize: width * width + width,
});
await ddp.ready;
const issued: { work: Work; issuedAt: number; observedAt: number }[] = [];
const allReduce = group.allReduce.bind(group);
group.allReduce = (...args: Parameters<typeof allReduce>) => {
  // The time is taken before the call: a peer that is already waiting (rank 0, 200 ms ahead) lets
  // the worker finish the op within a millisecond of the post, before this thread reads the clock.
  const issuedAt = now();
  const work = allReduce(...args);
  const entry = { work, issuedAt, observedAt: 0 };
  void work.promise.then(() => {
    entry.observedAt = now();
  });
  issued.push(entry);
  return work;
};
const x = tensor(
  Array.from({ length: 4 * width }, (_, i) => Math.sin(i + group.rank)),
  { backend, shape: [4, width] },
);
const y = tensor(
  Array.from({ length: 4 * width }, (_, i) => Math.cos(i)),
  { backend, shape: [4, width] },
);
for (const step of [0, 1]) {
  // The ranks drift apart: rank 1 starts each step later.
  if (group.rank === 1) await new Promise((resolve) => setTimeout(resolve, 200));
  for (const slow of slows) slow.busyMs = step === 1 ? busyMs : 0;
  issued.length = 0;
  model.zeroGrad({ setToNone: true });
  const loss = mseLoss(await ddp.call(x), y);
  await loss.backward();
  loss.free();
}
const ran = slows.map((slow) => slow.kernel!).sort((a, b) => a.start - b.start);
const before = issued
  .filter((entry) => entry.issuedAt < ran[0]!.start)
  .map(({ work, issuedAt, observedAt }) => {
    const fromWorker = WorkerGroup.completedAt(work);
    return {
      issuedAt,
      completedAt: fromWorker ?? observedAt,
      fromWorker: fromWorker !== undefined,
    };
  });
const last = model.parameters().at(-2)!;
const grad = Array.from((await last.grad!.read()).slice(0, 4));
const report: KernelRankReport = {
  rank: group.rank,
  progress,
  before,
  kernelStart: ran[0]!.start,
  kernelEnd: ran.at(-1)!.end,
  kernels: ran,
  grad,
};
process.stdout.write(`REPORT ${JSON.stringify(report)}\n`);
await group.close();
process.exit(0);
