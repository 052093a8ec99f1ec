// One rank of a fault-injection run in its own process ([Note: the fault-injection suite]): joins
// through the torchrun environment, runs the plan given as JSON, prints its report, and stays
// until its stdin closes (or, when survivors leave, goes at once). As the victim it kills itself
// (SIGKILL), stops itself (SIGSTOP) or destroys its sockets, when the plan says.
import { Socket } from 'node:net';
import { connectNetworkTransport } from '../connect-transport.js';
import { ProcessGroup } from '../process-group.js';
import type { FaultPlan } from './fault-plan.js';
import { faultGroupOptions, runFaultRank } from './fault-rank.js';
import { REPORT_MARK } from './fault-world.js';

const plan = JSON.parse(process.argv[2]!) as FaultPlan;
const backend = plan.world === 'tcp-processes' ? 'tcp' : 'ws';
const transport = await connectNetworkTransport({ backend, timeoutMs: 20_000 });
const group = ProcessGroup.fromTransport(transport, faultGroupOptions(plan));
const pipes = new Set<unknown>([process.stdin, process.stdout, process.stderr]);
const report = await runFaultRank(group, plan, {
  kill: () => process.kill(process.pid, 'SIGKILL'),
  stop: () => process.kill(process.pid, 'SIGSTOP'),
  closeSockets: () => {
    const handles = (process as unknown as { _getActiveHandles(): unknown[] })._getActiveHandles();
    for (const handle of handles) {
      if (handle instanceof Socket && !pipes.has(handle)) handle.destroy();
    }
  },
});
if (report === null) {
  // Cut off from the group: wait to be killed.
  await new Promise(() => setInterval(() => {}, 1000));
}
process.stdout.write(`${REPORT_MARK}${JSON.stringify(report)}\n`);
if (!plan.leave) {
  process.stdin.resume();
  await new Promise((resolve) => process.stdin.once('close', resolve));
}
await group.close().catch(() => {});
await transport.close().catch(() => {});
process.exit(0);
