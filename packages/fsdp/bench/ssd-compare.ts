// ssdOffload's options compared by measurement (`pnpm --filter @webshard/fsdp bench:ssd --rounds
// 5`): every variant of `SSD_MODES` once a round, the rounds interleaved so load from other work
// falls on every variant alike; per variant the median over rounds of rank 0's median step, the
// bytes a step reads and writes, the peaks; the load average before and after. Prints a markdown
// table for packages/fsdp/README.md.
import { loadavg } from 'node:os';
import { type SsdCost, SSD_MODES, ssdCost } from './ssd-offload.js';
import type { GptConfig } from '../src/test-support/gpt.js';

const index = process.argv.indexOf('--rounds');
const rounds = index >= 0 ? Number(process.argv[index + 1]) : 5;
const CONFIG: GptConfig = { vocabSize: 256, blockSize: 32, nLayer: 4, nHead: 4, nEmbd: 96 };
const ROWS = 4;
const median = (v: number[]) => [...v].sort((a, b) => a - b)[v.length >> 1]!;
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

const before = load();
const runs = SSD_MODES.map(() => [] as SsdCost[]);
for (let r = 0; r < rounds; r++) {
  for (const [i, [, mode]] of SSD_MODES.entries())
    runs[i]!.push(await ssdCost(CONFIG, ROWS, 5, mode));
  console.error(`round ${r + 1} of ${rounds}, load ${load()}`);
}
const MiB = 2 ** 20;
const memoryMs = median(runs[0]!.map((c) => c.stepMs));
console.log(`load average (1, 5, 15 min) before: ${before}; after: ${load()}; ${rounds} rounds`);
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
    `| ${label} | ${ms.toFixed(0)} ms | ${(ms / memoryMs).toFixed(2)}x | ${paired(i, 0)}x, ${paired(i, 1)}x | ${Math.min(...times).toFixed(0)}-${Math.max(...times).toFixed(0)} ms | ${cpuMs.toFixed(0)} ms | ${(cpuMs / memoryCpu).toFixed(2)}x | ${mib(median(costs.map((x) => x.bytesRead)))} | ${mib(median(costs.map((x) => x.bytesWritten)))} | ${mib(c.peakBytes)} | ${mib(c.stepPeakBytes)} |`,
  );
}
console.log(`FP32 shards per rank: ${(runs[1]![0]!.shardBytes / MiB).toFixed(2)} MiB`);
