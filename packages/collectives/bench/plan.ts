import type { ProcessGroup } from '../src/process-group.js';
import { shardRange } from '../src/shard.js';

/** The collectives the benchmark times. */
export const BENCH_OPS = ['allReduce', 'allGather', 'reduceScatter', 'broadcast'] as const;
/**
 * The ops, and an all-reduce and a reduce-scatter of registered buffers (`ProcessGroup.allocate`,
 * input and output), which run in place on shm's world group and on tcp, and like `allReduce` and
 * `reduceScatter` elsewhere.
 */
export type BenchOp =
  | (typeof BENCH_OPS)[number]
  | 'allReduceRegistered'
  | 'reduceScatterRegistered';

/** The registered variants, run on the transports that have registered memory. */
export const REGISTERED_OPS: readonly BenchOp[] = [
  'allReduceRegistered',
  'reduceScatterRegistered',
];

/** What every rank runs: each op at each size (MiB, nccl-tests sizing). */
export interface BenchPlan {
  ops: readonly BenchOp[];
  sizesMiB: readonly number[];
  warmup: number;
}

/** One measurement, as rank 0 reports it. */
export interface BenchResult {
  op: BenchOp;
  world: number;
  sizeMiB: number;
  /** Median over iterations of the slowest rank's time. */
  medianMs: number;
  iterations: number;
}

const MiB = 1 << 20;

/** Iterations as gloo_bench.py takes them: 41 up to 1 MiB, 15 up to 16 MiB, 9 above. */
export function iterationsFor(bytes: number): number {
  return bytes <= MiB ? 41 : bytes <= 16 * MiB ? 15 : 9;
}

/** The nccl-tests bus-bandwidth factor of an op on `n` ranks. */
export function busFactor(op: BenchOp, n: number): number {
  if (op === 'allReduce' || op === 'allReduceRegistered') return (2 * (n - 1)) / n;
  if (op === 'broadcast') return 1;
  return (n - 1) / n;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/**
 * The per-rank body, the same for every transport: per iteration a barrier, the timed op, then an
 * all-reduce(max) of the durations, so each iteration counts the slowest rank, as gloo_bench.py
 * does (which runs its ops one after the other; these are interleaved, see below). Sizes follow nccl-tests: all-reduce and broadcast move S bytes per rank;
 * all-gather gathers S bytes in total (S/n per rank); reduce-scatter reduces S bytes to S/n.
 */
export async function runBenchPlan(group: ProcessGroup, plan: BenchPlan): Promise<BenchResult[]> {
  const n = group.size;
  const results: BenchResult[] = [];
  const slowest = new Float32Array(1);
  for (const sizeMiB of plan.sizesMiB) {
    const count = (sizeMiB * MiB) / 4;
    const full = new Float32Array(count).fill(1);
    const shard = new Float32Array(Math.ceil(count / n)).fill(1);
    const registered = plan.ops.some((op) => REGISTERED_OPS.includes(op))
      ? group.allocate('f32', count).fill(1)
      : null;
    const registeredShard = plan.ops.includes('reduceScatterRegistered')
      ? group.allocate('f32', shardRange(count, n, group.rank).count)
      : null;
    const run = (op: BenchOp) => {
      switch (op) {
        case 'allReduce':
          return group.allReduce(full).wait();
        case 'allReduceRegistered':
          return group.allReduce(registered!).wait();
        case 'allGather':
          return group
            .allGather(shard.subarray(0, shardRange(count, n, group.rank).count), full)
            .wait();
        case 'reduceScatter':
          return group
            .reduceScatter(full, shard.subarray(0, shardRange(count, n, group.rank).count))
            .wait();
        case 'reduceScatterRegistered':
          return group.reduceScatter(registered!, registeredShard!).wait();
        case 'broadcast':
          return group.broadcast(full, 0).wait();
      }
    };
    for (const op of plan.ops) for (let i = 0; i < plan.warmup; i++) await run(op);
    const iterations = iterationsFor(sizeMiB * MiB);
    const times = plan.ops.map((): number[] => []);
    // Interleaved, an iteration of each op in turn: this machine's speed drifts within a run
    // (the same op measured up to 2x slower at the end of a run than at its start), and run
    // one after the other the ops listed last would pay for it.
    for (let i = 0; i < iterations; i++) {
      for (const [index, op] of plan.ops.entries()) {
        await group.barrier().wait();
        const t0 = performance.now();
        await run(op);
        slowest[0] = performance.now() - t0;
        await group.allReduce(slowest, { op: 'max' }).wait();
        times[index]!.push(slowest[0]);
        // Keep all-reduce inputs finite: repeated sums of ones grow by n each time.
        if (op === 'allReduce') full.fill(1);
        if (op === 'allReduceRegistered') registered!.fill(1);
      }
    }
    for (const [index, op] of plan.ops.entries()) {
      results.push({ op, world: n, sizeMiB, medianMs: median(times[index]!), iterations });
    }
    if (registered !== null) group.free(registered);
    if (registeredShard !== null) group.free(registeredShard);
  }
  return results;
}
