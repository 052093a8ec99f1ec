// One rank of the network benchmark in its own process (started by index.ts with torchrun's
// environment). Rank 0 prints the results as one JSON line.
import { ProcessGroup } from '../src/process-group.js';
import { connectNetworkTransport, type NetworkBackend } from '../src/connect-transport.js';
import { type BenchPlan, runBenchPlan } from './plan.js';

const [backend, planText] = process.argv.slice(2) as [NetworkBackend, string];
const transport = await connectNetworkTransport({ backend, timeoutMs: 60_000 });
const group = ProcessGroup.fromTransport(transport, { timeoutMs: 120_000 });
const results = await runBenchPlan(group, JSON.parse(planText) as BenchPlan);
if (group.rank === 0) process.stdout.write(`@@results ${JSON.stringify(results)}\n`);
await group.close();
process.exit(0);
