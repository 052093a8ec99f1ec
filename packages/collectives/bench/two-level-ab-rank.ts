// One rank of the two-level A/B rows of `pnpm bench` (transport `two-level-ab`): each iteration
// runs an op with the node's phases on staged memory, then with the slot schedule
// (WEBSHARD_TWO_LEVEL_ROUNDS=1, which the plan reads at every op), so both see the same load on
// this shared machine. Also the process's CPU time per op (this node's threads and the kernel's
// copies for them), which the load does not inflate as it does the wall time. Rank 0 prints
// results as one JSON line.
import { initProcessGroup } from '../src/init-process-group.js';
import { shardRange } from '../src/shard.js';
import { type BenchOp, iterationsFor } from './plan.js';
import type { AbResult } from './two-level.js';

const { ops, sizesMiB, warmup } = JSON.parse(process.argv[2]!) as {
  ops: BenchOp[];
  sizesMiB: number[];
  warmup: number;
};
const group = await initProcessGroup({ timeoutMs: 60_000, group: { timeoutMs: 120_000 } });
const { rank, size } = group;
const slowest = new Float32Array(1);
const median = (values: number[]) => [...values].sort((a, b) => a - b)[values.length >> 1]!;
const results: AbResult[] = [];
for (const sizeMiB of sizesMiB) {
  const count = (sizeMiB << 20) / 4;
  const shard = shardRange(count, size, rank);
  const full = new Float32Array(count).fill(1);
  const out = new Float32Array(shard.count);
  const registered = group.allocate('f32', count).fill(1);
  const registeredOut = group.allocate('f32', shard.count);
  const run = (op: BenchOp) => {
    switch (op) {
      case 'allReduce':
        return group.allReduce(full.fill(1)).wait();
      case 'allReduceRegistered':
        return group.allReduce(registered.fill(1)).wait();
      case 'reduceScatter':
        return group.reduceScatter(full, out).wait();
      case 'reduceScatterRegistered':
        return group.reduceScatter(registered, registeredOut).wait();
      default:
        return group.allGather(out, full).wait();
    }
  };
  for (const op of ops) {
    const times = { staged: [] as number[], slots: [] as number[] };
    const cpu = { staged: [] as number[], slots: [] as number[] };
    const iterations = iterationsFor(sizeMiB << 20);
    for (let i = -warmup; i < iterations; i++) {
      for (const variant of ['staged', 'slots'] as const) {
        process.env.WEBSHARD_TWO_LEVEL_ROUNDS = variant === 'slots' ? '1' : '0';
        await group.barrier().wait();
        const c0 = process.cpuUsage();
        const t0 = performance.now();
        await run(op);
        slowest[0] = performance.now() - t0;
        const used = process.cpuUsage(c0);
        await group.allReduce(slowest, { op: 'max' }).wait();
        if (i < 0) continue;
        times[variant].push(slowest[0]);
        cpu[variant].push((used.user + used.system) / 1e3);
      }
    }
    for (const variant of ['staged', 'slots'] as const) {
      results.push({
        op,
        variant,
        sizeMiB,
        medianMs: median(times[variant]),
        cpuMs: median(cpu[variant]),
      });
    }
  }
  group.free(registered);
  group.free(registeredOut);
}
if (rank === 0) process.stdout.write(`@@results ${JSON.stringify(results)}\n`);
await group.close();
