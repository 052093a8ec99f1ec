// A rank of barrier-yield.test.ts: rank 0 issues an all-reduce its peer joins `lateMs` later and,
// without awaiting it, computes in slices separated by microtask turns (the way backward's
// post-accumulate hooks, which the engine awaits, separate its kernels) or by progress turns
// (`group.progress()`, as DDP's hooks take while a bucket is in flight), then awaits it. What the
// thread lost between its slices is time an op nobody awaited yet took from compute.
import type { ProcessGroup } from '../../process-group.js';
import { runShmWorker } from '../../transports/shm/launch-threads.js';

export interface BarrierYieldJob {
  /** How late rank 1 issues each all-reduce, ms. */
  lateMs: number;
  /** All-reduces, one after another. */
  ops: number;
  /** Rank 0's compute between issuing and awaiting: slices of `sliceMs` of busy work. */
  slices: number;
  sliceMs: number;
  /** Between slices, `await group.progress()` (a progress turn) instead of a microtask turn. */
  turns?: boolean;
}

export interface BarrierYieldReport {
  /** Per op, on rank 0: the longest time between two slices (0 when nothing ran between them). */
  stalls: number[];
  /**
   * Per op, on rank 0: the time this thread spent in `Atomics.wait` between issuing the op and
   * awaiting it, ms. Unlike a stall, which a loaded machine's scheduler also makes, only a
   * barrier blocking the thread adds to it.
   */
  blocked: number[];
  /** Per op, every element of the all-reduce's result. */
  sums: number[][];
}

function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // compute
  }
}

/** `Atomics.wait`, timed while `counting` is on (this worker thread's own global). */
let counting = false;
let blockedMs = 0;
const wait = Atomics.wait;
Atomics.wait = ((...args: Parameters<typeof Atomics.wait>) => {
  if (!counting) return wait(...args);
  const start = performance.now();
  try {
    return wait(...args);
  } finally {
    blockedMs += performance.now() - start;
  }
}) as typeof Atomics.wait;

async function main(group: ProcessGroup, job: BarrierYieldJob): Promise<BarrierYieldReport> {
  const stalls: number[] = [];
  const blocked: number[] = [];
  const sums: number[][] = [];
  const data = group.allocate('f32', 1024);
  for (let op = 0; op < job.ops; op++) {
    data.fill(group.rank + 1 + op);
    if (group.rank === 0) {
      blockedMs = 0;
      counting = true;
      const work = group.allReduce(data);
      let stall = 0;
      let last = performance.now();
      for (let s = 0; s < job.slices; s++) {
        if (job.turns) await group.progress();
        else await Promise.resolve();
        stall = Math.max(stall, performance.now() - last);
        busy(job.sliceMs);
        last = performance.now();
      }
      counting = false;
      stalls.push(stall);
      blocked.push(blockedMs);
      await work.wait();
    } else {
      await new Promise((resolve) => setTimeout(resolve, job.lateMs));
      await group.allReduce(data).wait();
    }
    sums.push([...new Set(data)]);
  }
  group.free(data);
  return { stalls, blocked, sums };
}

void runShmWorker(main);
