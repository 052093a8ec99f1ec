// A quick look at shm collective bus bandwidth (not a test, not the benchmark):
//   npx tsx --conditions=@webshard/source src/test-support/shm/shm-probe.ts [worlds] [sizesMiB] [ops] [slotKiB]
// Each iteration: barrier, the op, then an all-reduce(max) of the durations (the slowest rank).
// Every op is timed twice, interleaved: on the world group (the shared-memory schedules) and on a
// sub-group of all ranks (point-to-point messages through the rings, as before them), so a busy
// machine skews both alike.
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { isMainThread } from 'node:worker_threads';
import type { ProcessGroup } from '../../process-group.js';
import { shardRange } from '../../shard.js';
import { launchThreads, runShmWorker } from '../../transports/shm/launch-threads.js';

interface ProbePlan {
  sizesMiB: number[];
  ops: string[];
}

const MiB = 1 << 20;

async function probe(world: ProcessGroup, plan: ProbePlan): Promise<string[]> {
  const n = world.size;
  const p2p = world.newGroup(Array.from({ length: n }, (_, r) => r))!;
  const lines: string[] = [];
  const slowest = new Float32Array(1);
  for (const sizeMiB of plan.sizesMiB) {
    const count = (sizeMiB * MiB) / 4;
    const full = new Float32Array(count).fill(1);
    const shard = new Float32Array(shardRange(count, n, world.rank).count).fill(1);
    for (const op of plan.ops) {
      const run = (group: ProcessGroup) => {
        if (op === 'allReduce') return group.allReduce(full).wait();
        if (op === 'allGather') return group.allGather(shard, full).wait();
        if (op === 'reduceScatter') return group.reduceScatter(full, shard).wait();
        return group.broadcast(full, 0).wait();
      };
      const time = async (group: ProcessGroup) => {
        await group.barrier().wait();
        const t0 = performance.now();
        await run(group);
        slowest[0] = performance.now() - t0;
        await group.allReduce(slowest, { op: 'max' }).wait();
        if (op === 'allReduce') full.fill(1);
        return slowest[0];
      };
      for (let i = 0; i < 2; i++) {
        await time(world);
        await time(p2p);
      }
      const times = { shm: [] as number[], p2p: [] as number[] };
      const iterations = sizeMiB <= 1 ? 31 : sizeMiB <= 16 ? 9 : 5;
      for (let i = 0; i < iterations; i++) {
        times.shm.push(await time(world));
        times.p2p.push(await time(p2p));
      }
      const factor = op === 'allReduce' ? (2 * (n - 1)) / n : op === 'broadcast' ? 1 : (n - 1) / n;
      const busbw = (samples: number[]) => {
        const ms = [...samples].sort((a, b) => a - b)[samples.length >> 1]!;
        return Math.round(((sizeMiB * MiB) / (ms / 1e3) / 1e6) * factor);
      };
      lines.push(
        `${op.padEnd(14)} ${n} ranks ${String(sizeMiB).padStart(3)} MiB  busbw MB/s: p2p ${String(busbw(times.p2p)).padStart(5)}  shared ${String(busbw(times.shm)).padStart(5)}`,
      );
    }
  }
  return lines;
}

if (isMainThread) {
  const worlds = (process.argv[2] ?? '2,4').split(',').map(Number);
  const sizesMiB = (process.argv[3] ?? '1,16,64').split(',').map(Number);
  const ops = (process.argv[4] ?? 'allReduce,reduceScatter,allGather,broadcast').split(',');
  const slotBytes = process.argv[5] === undefined ? undefined : Number(process.argv[5]) * 1024;
  const tsx = pathToFileURL(
    createRequire(import.meta.url)
      .resolve('tsx/esm/api')
      .replace(/\.cjs$/, '.mjs'),
  ).href;
  const self = pathToFileURL(fileURLToPath(import.meta.url)).href;
  const bootstrap = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(self)}); })`;
  for (const world of worlds) {
    const outcomes = await launchThreads<ProbePlan, string[]>(
      world,
      bootstrap,
      { sizesMiB, ops },
      {
        eval: true,
        execArgv: ['--conditions=@webshard/source'],
        group: { timeoutMs: 120_000 },
        slotBytes,
      },
    );
    const first = outcomes[0]!;
    if (first.status !== 'fulfilled') throw new Error(JSON.stringify(first));
    for (const line of first.value) console.log(line);
  }
} else {
  void runShmWorker(probe);
}
