// A rank of the progress tests (worker-progress.test.ts, progress-turns.test.ts), started by
// webshard-run: joins over tcp with its communication on the thread or on a worker (argv[2]),
// trains two steps of three FSDP units, the second step with `kernels` (argv[4], default 1)
// kernels of `busyMs` (argv[3]) that never yield in the first unit's forward and as many in its
// backward, a layer between each two, with `limitAllGathers` argv[5] (default 1), and prints what
// it saw as one JSON line. With argv[6] `freeze`, rank 1 stops itself (SIGSTOP, a closed laptop)
// as the second step starts, the group's timeout is 3 s, and rank 0 reports the error its step
// failed with (and exits with 3).
import { initProcessGroup, type Work, WorkerGroup } from '@webshard/collectives';
import {
  createCpuBackend,
  Linear,
  Module,
  mseLoss,
  ModuleList,
  mul,
  RandomGenerator,
  ReLU,
  Sequential,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { FullyShardedDataParallel } from '../fully-sharded.js';

/** One collective issued before a kernel (times on `performance.timeOrigin + now()`). */
export interface IssuedOp {
  readonly op: string;
  readonly issuedAt: number;
  readonly completedAt: number;
  readonly fromWorker: boolean;
}

/** What a rank reports: per kernel, the collectives issued since the last one and before it. */
export interface KernelRankReport {
  readonly rank: number;
  readonly kernels: { phase: string; start: number; end: number; before: IssuedOp[] }[];
  /** The first elements of the last layer's reduced gradient shard. */
  readonly grad: number[];
  /** With `freeze`, rank 0's: what its second step failed with, and after how long. */
  readonly error?: {
    name: string;
    message: string;
    op?: string;
    blamed?: number[];
    afterMs: number;
    /** The all-gathers the step had issued when it failed. */
    gathersIssued: number;
  };
}

const now = () => performance.timeOrigin + performance.now();

/** Spins this thread for `ms`: no await, no yield. */
function busyFor(ms: number): { start: number; end: number } {
  const start = now();
  const end = performance.now() + ms;
  let x = 0;
  while (performance.now() < end) x += Math.sqrt(x + 1);
  if (x < 0) throw new Error('unreachable');
  return { start, end: now() };
}

/** The identity with a kernel in its forward and one in its backward (its input's hook). */
class Slow extends Module<[Tensor], Tensor> {
  busyMs = 0;
  readonly kernels: { phase: string; start: number; end: number }[] = [];
  forward(x: Tensor): Tensor {
    const ms = this.busyMs;
    if (ms > 0) {
      this.kernels.push({ phase: 'forward', ...busyFor(ms) });
      x.registerHook(() => {
        this.kernels.push({ phase: 'backward', ...busyFor(ms) });
        return undefined;
      });
    }
    // A new tensor: Sequential frees what a module returned once the next one used it.
    return mul(x, 1);
  }
}

/** Units one after the other (each unit's call is async: its gathers are awaited). */
class Chain extends Module<[Tensor], Promise<Tensor>> {
  readonly units: ModuleList<FullyShardedDataParallel<[Tensor], Tensor>>;
  constructor(units: FullyShardedDataParallel<[Tensor], Tensor>[]) {
    super();
    this.units = this.registerModule('units', new ModuleList(units));
  }
  async forward(x: Tensor): Promise<Tensor> {
    let h = x;
    for (const unit of this.units) {
      const next = await unit.call(h);
      if (h !== x) h.free();
      h = next;
    }
    return h;
  }
}

const progress = process.argv[2] === 'worker' ? 'worker' : 'thread';
const busyMs = Number(process.argv[3] ?? '1200');
const kernelCount = Number(process.argv[4] ?? '1');
const limitAllGathers = Number(process.argv[5] ?? '1');
const freeze = process.argv[6] === 'freeze';
const timeoutMs = freeze ? 3000 : 30_000;
const group = await initProcessGroup({ backend: 'tcp', timeoutMs, progress });
const backend = createCpuBackend();
const width = 512;
const generator = new RandomGenerator(7);
const slows = Array.from({ length: kernelCount }, () => new Slow());
const first = new FullyShardedDataParallel(
  new Sequential(
    new Linear(width, width, { backend, generator }),
    new ReLU(),
    slows[0]!,
    ...slows
      .slice(1)
      .flatMap((slow) => [new Linear(width, width, { backend, generator }), new ReLU(), slow]),
  ),
  { group, bucketCapMb: 0, limitAllGathers },
);
const middle = new FullyShardedDataParallel(new Linear(width, width, { backend, generator }), {
  group,
  bucketCapMb: 0,
  limitAllGathers,
});
const last = new FullyShardedDataParallel(new Linear(width, width, { backend, generator }), {
  group,
  bucketCapMb: 0,
  limitAllGathers,
});
// `bucketCapMb: 0`: each unit's reduce-scatter goes when its gradients are complete (not batched
// with the next unit's). Three units: in backward the middle unit's reduce-scatter is issued
// after the first unit's gather was prefetched, so nothing the rank awaits before the kernel
// queues behind it.
const model = new FullyShardedDataParallel(new Chain([first, middle, last]), {
  group,
  limitAllGathers,
  bucketCapMb: 0,
});
const issued: { op: string; work: Work; issuedAt: number; observedAt: number }[] = [];
// The time is taken before the call (`issue`): a peer already waiting lets the worker finish the
// op within a millisecond of the post, before this thread could read the clock after it.
const record = (op: string, issue: () => Work): Work => {
  const issuedAt = now();
  const work = issue();
  const entry = { op, work, issuedAt, observedAt: 0 };
  // The op's own failure reaches whoever awaits it; this branch only notes the time.
  work.promise.then(
    () => {
      entry.observedAt = now();
    },
    () => undefined,
  );
  issued.push(entry);
  return work;
};
const allGather = group.allGather.bind(group);
group.allGather = (...args) => record('allGather', () => allGather(...args));
const reduceScatter = group.reduceScatter.bind(group);
group.reduceScatter = (...args) => record('reduceScatter', () => reduceScatter(...args));
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
  if (freeze && step === 1 && group.rank === 1) process.kill(process.pid, 'SIGSTOP');
  for (const slow of slows) slow.busyMs = step === 1 ? busyMs : 0;
  issued.length = 0;
  const started = now();
  try {
    const loss = mseLoss(await model.call(x), y);
    await loss.backward();
    loss.free();
  } catch (caught) {
    if (!freeze) throw caught;
    const e = caught as Error & { op?: string; blamed?: number[] };
    const error = {
      name: e.name,
      message: e.message,
      op: e.op,
      blamed: e.blamed,
      afterMs: now() - started,
      gathersIssued: issued.filter((entry) => entry.op === 'allGather').length,
    };
    const report: KernelRankReport = { rank: group.rank, kernels: [], grad: [], error };
    process.stdout.write(`REPORT ${JSON.stringify(report)}\n`);
    // Whatever the other gathers in flight do now must not take the process down first.
    await new Promise((resolve) => setTimeout(resolve, 500));
    process.exit(3);
  }
}
let since = 0;
const ran = slows.flatMap((slow) => slow.kernels).sort((a, b) => a.start - b.start);
const kernels = ran.map((kernel) => {
  const before = issued
    .filter((entry) => entry.issuedAt >= since && entry.issuedAt < kernel.start)
    .map(({ op, work, issuedAt, observedAt }) => {
      const fromWorker = WorkerGroup.completedAt(work);
      return {
        op,
        issuedAt,
        completedAt: fromWorker ?? observedAt,
        fromWorker: fromWorker !== undefined,
      };
    });
  since = kernel.end;
  return { ...kernel, before };
});
const shard = last.parameters()[0]!;
const report: KernelRankReport = {
  rank: group.rank,
  kernels,
  grad: Array.from((await shard.grad!.read()).slice(0, 4)),
};
process.stdout.write(`REPORT ${JSON.stringify(report)}\n`);
await group.close();
process.exit(0);
