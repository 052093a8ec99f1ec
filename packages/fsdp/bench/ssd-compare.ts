// ssdOffload's options compared by measurement (`pnpm --filter @webshard/fsdp bench:ssd --rounds
// 5`): every variant of `SSD_MODES` once a round, the rounds interleaved so load from other work
// falls on every variant alike; per variant the median over rounds of rank 0's median step, the
// bytes a step reads and writes, the peaks; the load average before and after. Prints a markdown
// table for packages/fsdp/README.md. Ranks are 2 in this thread over `local` (bench/ssd-offload.ts),
// or with `--shm` 2 worker threads over `shm` (bench/shm-step.ts running bench/step-job.ts: one rank a thread, the slowest
// rank's step between barriers), where one rank's file I/O does not hold the other's thread.
import { loadavg } from 'node:os';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runShmStep } from './shm-launch.js';
import { type SsdCost, type SsdMode, SSD_MODES, ssdCost } from './ssd-offload.js';
import type { GptConfig } from '../src/test-support/gpt.js';

const SHM = process.argv.includes('--shm');
const index = process.argv.indexOf('--rounds');
const rounds = index >= 0 ? Number(process.argv[index + 1]) : 5;
const CONFIG: GptConfig = { vocabSize: 256, blockSize: 32, nLayer: 4, nHead: 4, nEmbd: 96 };
const ROWS = 4;
const median = (v: number[]) => [...v].sort((a, b) => a - b)[v.length >> 1]!;
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

/** `ssdCost` with the ranks as shm threads (no CPU time or step peak: 0). */
async function shmCost(
  config: GptConfig,
  rows: number,
  steps: number,
  mode: SsdMode,
): Promise<SsdCost> {
  const dir = await mkdtemp(join(tmpdir(), 'fsdp-bench-ssd-shm-'));
  try {
    const r = await runShmStep(2, {
      config,
      rows,
      limitAllGathers: mode.limitAllGathers ?? 1,
      warmup: 1,
      iterations: steps - 1,
      strategy: 'fsdp',
      registered: true,
      ...(mode.offload ? { ssd: { dir, ...mode } } : {}),
    });
    return {
      stepMs: r.stepMs,
      cpuMs: 0,
      bytesRead: r.bytesRead,
      bytesWritten: r.bytesWritten,
      shardBytes: 0,
      peakBytes: r.peakBytes,
      stepPeakBytes: 0,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const before = load();
const runs = SSD_MODES.map(() => [] as SsdCost[]);
for (let r = 0; r < rounds; r++) {
  for (const [i, [, mode]] of SSD_MODES.entries())
    runs[i]!.push(await (SHM ? shmCost : ssdCost)(CONFIG, ROWS, 5, mode));
  console.error(`round ${r + 1} of ${rounds}, load ${load()}`);
}
const MiB = 2 ** 20;
const memoryMs = median(runs[0]!.map((c) => c.stepMs));
console.log(
  `${SHM ? '2 shm threads' : '2 ranks in one thread (local)'}; load average (1, 5, 15 min) before: ${before}; after: ${load()}; ${rounds} rounds`,
);
const memoryCpu = median(runs[0]!.map((c) => c.cpuMs));
console.log(
  '| run | step (median of rounds) | vs in memory | paired: vs in memory, vs defaults | runs spread | CPU a step (both ranks) | vs in memory | read / step and rank | written / step and rank | peak per rank | peak during the step |',
);
console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
/** The median over rounds of variant `i`'s step over variant `j`'s in the same round. */
const paired = (i: number, j: number) =>
  median(runs[i]!.map((c, r) => c.stepMs / runs[j]![r]!.stepMs)).toFixed(2);
for (const [i, [label]] of SSD_MODES.entries()) {
  const costs = runs[i]!;
  const times = costs.map((c) => c.stepMs);
  const ms = median(times);
  const cpuMs = median(costs.map((x) => x.cpuMs));
  const mib = (v: number) => (v === 0 ? '-' : `${(v / MiB).toFixed(2)} MiB`);
  const c = costs[0]!;
  console.log(
    `| ${label} | ${ms.toFixed(0)} ms | ${(ms / memoryMs).toFixed(2)}x | ${paired(i, 0)}x, ${paired(i, 1)}x | ${Math.min(...times).toFixed(0)}-${Math.max(...times).toFixed(0)} ms | ${SHM ? '-' : `${cpuMs.toFixed(0)} ms`} | ${SHM ? '-' : `${(cpuMs / memoryCpu).toFixed(2)}x`} | ${mib(median(costs.map((x) => x.bytesRead)))} | ${mib(median(costs.map((x) => x.bytesWritten)))} | ${mib(c.peakBytes)} | ${mib(c.stepPeakBytes)} |`,
  );
}
if (!SHM) console.log(`FP32 shards per rank: ${(runs[1]![0]!.shardBytes / MiB).toFixed(2)} MiB`);
