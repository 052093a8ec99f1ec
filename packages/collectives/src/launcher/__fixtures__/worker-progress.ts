// A rank started by webshard-run as a thread, its communication on its worker (`progress:
// 'worker'`): an all-reduce issued before a 1.5 s kernel that never yields must complete while
// the kernel runs, by the worker's clock; prints the sum, the group's class and whether it did.
import { initProcessGroup } from '../../init-process-group.js';
import { allReduceDuringKernel } from '../../test-support/comm-worker-world.js';

const group = await initProcessGroup({ progress: 'worker', timeoutMs: 20_000 });
const { first, last, insideKernel } = await allReduceDuringKernel(group);
console.log(
  `rank ${group.rank} of ${group.size} over ${group.transport.kind} (${group.constructor.name}): sum ${first} ${last}, done inside the kernel ${insideKernel}`,
);
await group.close();
