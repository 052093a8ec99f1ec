// One rank's steps of the FSDP benchmark (FSDP, or DDP as its peer) on any group: run by a shm
// rank thread (shm-step.ts) or a tcp rank process (tcp-rank.ts).
import { join } from 'node:path';
import { median } from '@webshard/bench';
import type { ProcessGroup } from '@webshard/collectives';
import { DistributedDataParallel } from '@webshard/ddp-buckets';
import {
  AdamW,
  type Backend,
  createCpuBackend,
  GPTBlock,
  type Module,
  type Tensor,
} from '@webshard/tensor-core';
import { NodeFileStore } from '../src/checkpoint/index.js';
import {
  autoWrap,
  type FullyShardedDataParallel,
  moduleClassAutoWrapPolicy,
  stepOffloaded,
} from '../src/index.js';
import { Gpt, type GptConfig, tokenBatches, tokenSlice } from '../src/test-support/gpt.js';

export interface StepJob {
  readonly config: GptConfig;
  /** Sequences per rank per step. */
  readonly rows: number;
  readonly limitAllGathers: number;
  readonly warmup: number;
  readonly iterations: number;
  /** FSDP, or the peer: DDP over the same model and ranks. */
  readonly strategy: 'fsdp' | 'ddp';
  /**
   * False: FSDP's flat buffers are ordinary tensors, copied through the arena by every collective
   * (the peer of [Note: flat buffers in registered memory]).
   */
  readonly registered: boolean;
  /** FSDP with `ssdOffload`: a `NodeFileStore` in `dir/rank<r>`, with these options. */
  readonly ssd?: {
    dir: string;
    readAhead?: boolean;
    offloadGradients?: boolean;
    /** Step with `stepOffloaded` instead of `optimizer.step()`. */
    stepOffloaded?: boolean;
  };
}

export interface StepResult {
  /** Median step time, ms. */
  readonly stepMs: number;
  /** Median time per step spent between issuing an all-gather and its completion, ms. */
  readonly gatherMs: number;
  /** Median time per step the step waited for gathers (not hidden behind compute), ms. */
  readonly exposedMs: number;
  /** Peak bytes: the allocator's peak plus the peak of registered (external) memory. */
  readonly peakBytes: number;
  /** Of that, the peak of registered memory (`memoryStats().peakExternalBytes`). */
  readonly registeredBytes: number;
  /** Median per step of the collectives that copied an operand through staging (`stagedOps`). */
  readonly stagedOps: number;
  /** With `ssd`: median bytes a step read from and wrote to the store (0 without). */
  readonly bytesRead: number;
  readonly bytesWritten: number;
}

function peaks(backend: Backend): { peakBytes: number; registeredBytes: number } {
  const stats = backend.memoryStats();
  const registeredBytes = stats.peakExternalBytes ?? 0;
  return { peakBytes: stats.peakAllocated + registeredBytes, registeredBytes };
}

/** The job's steps on this rank; each number this rank's median. */
export async function runStepJob(group: ProcessGroup, job: StepJob): Promise<StepResult> {
  const backend = createCpuBackend();
  if (job.strategy === 'ddp') return runDdp(group, job, backend);
  if (!job.registered) Object.defineProperty(group, 'allocatesRegistered', { value: false });
  const store = job.ssd ? new NodeFileStore(join(job.ssd.dir, `rank${group.rank}`)) : null;
  const model = autoWrap(new Gpt(job.config, backend), moduleClassAutoWrapPolicy([GPTBlock]), {
    group,
    limitAllGathers: job.limitAllGathers,
    ...(store && job.ssd
      ? {
          ssdOffload: {
            store,
            readAhead: job.ssd.readAhead,
            offloadGradients: job.ssd.offloadGradients,
          },
        }
      : {}),
  }) as unknown as Module<[Tensor, Tensor], Promise<Tensor>> & { parameters(): Tensor[] };
  const optimizer = new AdamW(model.parameters(), { lr: 1e-3 });
  let gatherMs = 0;
  let exposedMs = 0;
  const wrapped = model as unknown as FullyShardedDataParallel;
  for (const unit of wrapped.units()) {
    const group = unit.paramGroup;
    const wait = group.waitForUnshard.bind(group);
    group.waitForUnshard = async () => {
      const t0 = performance.now();
      await wait();
      exposedMs += performance.now() - t0;
    };
  }
  const original = group.allGather.bind(group);
  group.allGather = ((...args: Parameters<ProcessGroup['allGather']>) => {
    const t0 = performance.now();
    const work = original(...args);
    void work.promise.then(() => {
      gatherMs += performance.now() - t0;
    });
    return work;
  }) as ProcessGroup['allGather'];
  const batches = tokenBatches(job.config, job.warmup + job.iterations, job.rows * group.size);
  const steps: number[] = [];
  const gathers: number[] = [];
  const exposed: number[] = [];
  const staged: number[] = [];
  const reads: number[] = [];
  const writes: number[] = [];
  for (const [i, rows] of batches.entries()) {
    const [x, y] = tokenSlice(backend, rows, group.rank * job.rows, (group.rank + 1) * job.rows);
    if (i === job.warmup) backend.resetPeakMemoryStats();
    store?.resetStats();
    gatherMs = 0;
    exposedMs = 0;
    await group.barrier().wait();
    const stagedBefore = group.stagingStats().stagedOps;
    const t0 = performance.now();
    const loss = await model.call(x, y);
    await loss.backward();
    if (job.ssd?.stepOffloaded === true) await stepOffloaded(wrapped, optimizer);
    else optimizer.step();
    optimizer.zeroGrad();
    await group.barrier().wait();
    const ms = performance.now() - t0;
    loss.free();
    x.free();
    y.free();
    if (i >= job.warmup) {
      steps.push(ms);
      gathers.push(gatherMs);
      exposed.push(exposedMs);
      // Less the closing barrier's (it stages nothing either way: no operand).
      staged.push(group.stagingStats().stagedOps - stagedBefore);
      reads.push(store?.stats().bytesRead ?? 0);
      writes.push(store?.stats().bytesWritten ?? 0);
    }
  }
  return {
    stepMs: median(steps),
    gatherMs: median(gathers),
    exposedMs: median(exposed),
    ...peaks(backend),
    stagedOps: median(staged),
    bytesRead: median(reads),
    bytesWritten: median(writes),
  };
}

/** The same steps under DDP (the peer): every rank holds the whole model. */
async function runDdp(group: ProcessGroup, job: StepJob, backend: Backend): Promise<StepResult> {
  const net = new Gpt(job.config, backend);
  const ddp = new DistributedDataParallel(net, { group });
  await ddp.ready;
  const optimizer = new AdamW(net.parameters(), { lr: 1e-3 });
  const batches = tokenBatches(job.config, job.warmup + job.iterations, job.rows * group.size);
  const steps: number[] = [];
  const staged: number[] = [];
  for (const [i, rows] of batches.entries()) {
    const [x, y] = tokenSlice(backend, rows, group.rank * job.rows, (group.rank + 1) * job.rows);
    if (i === job.warmup) backend.resetPeakMemoryStats();
    await group.barrier().wait();
    const stagedBefore = group.stagingStats().stagedOps;
    const t0 = performance.now();
    const loss = (await ddp.call(x, y)) as Tensor;
    await loss.backward();
    optimizer.step();
    net.zeroGrad();
    await group.barrier().wait();
    const ms = performance.now() - t0;
    loss.free();
    x.free();
    y.free();
    if (i >= job.warmup) {
      steps.push(ms);
      staged.push(group.stagingStats().stagedOps - stagedBefore);
    }
  }
  return {
    stepMs: median(steps),
    gatherMs: 0,
    exposedMs: 0,
    ...peaks(backend),
    stagedOps: median(staged),
    bytesRead: 0,
    bytesWritten: 0,
  };
}
