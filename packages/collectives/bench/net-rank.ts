// One rank of the network benchmark in its own process (started by index.ts with torchrun's
// environment). Rank 0 prints the results as one JSON line. With a third argument (JSON ranks),
// the plan runs on that subgroup, whose first rank prints, and every rank then meets in a world
// barrier (rank 0 outside the subgroup keeps relaying for it: browser-ranks.ts).
import { ProcessGroup } from '../src/process-group.js';
import { connectNetworkTransport, type NetworkBackend } from '../src/connect-transport.js';
import { type BenchPlan, runBenchPlan } from './plan.js';

const [backend, planText, ranksText] = process.argv.slice(2) as [NetworkBackend, string, string?];
const transport = await connectNetworkTransport({ backend, timeoutMs: 60_000 });
const timeoutMs = ranksText === undefined ? 120_000 : 600_000;
const group = ProcessGroup.fromTransport(transport, { timeoutMs });
const plan = JSON.parse(planText) as BenchPlan;
const members = ranksText === undefined ? null : (JSON.parse(ranksText) as number[]);
const runner = members === null ? group : group.newGroup(members, { timeoutMs });
if (runner !== null) {
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  const results = await runBenchPlan(runner, plan);
  if (process.env.WEBSHARD_BENCH_CPU) {
    // Where a rank's time went: user and kernel CPU against wall time over the whole plan.
    const { user, system } = process.cpuUsage(cpu);
    const wall = performance.now() - t0;
    const share = (us: number) => `${((100 * us) / 1000 / wall).toFixed(0)}%`;
    process.stderr.write(
      `${backend} rank ${runner.rank}/${runner.size}: wall ${wall.toFixed(0)} ms, user ${share(user)}, system ${share(system)}\n`,
    );
  }
  if (runner.rank === 0) process.stdout.write(`@@results ${JSON.stringify(results)}\n`);
}
if (members !== null) await group.barrier().wait();
await group.close();
process.exit(0);
