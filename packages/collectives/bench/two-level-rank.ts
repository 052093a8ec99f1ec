// One rank of the two-level benchmark: a thread of one of two `webshard-run --nnodes 2` launchers
// (started by two-level.ts). Rank 0 prints the results as one JSON line.
import { initProcessGroup } from '../src/init-process-group.js';
import { type BenchPlan, runBenchPlan } from './plan.js';

const group = await initProcessGroup({ timeoutMs: 60_000, group: { timeoutMs: 120_000 } });
const results = await runBenchPlan(group, JSON.parse(process.argv[2]!) as BenchPlan);
if (group.rank === 0) process.stdout.write(`@@results ${JSON.stringify(results)}\n`);
await group.close();
