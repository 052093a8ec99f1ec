// A rank started by webshard-run as a thread, its communication on its worker (`progress:
// 'worker'`): an all-reduce issued before a 1.5 s kernel that never yields must complete while
// the kernel runs, by the worker's clock; prints the sum, the group's class and whether it did.
import { WorkerGroup } from '../../comm-worker/worker-group.js';
import { initProcessGroup } from '../../init-process-group.js';
import { busyFor } from '../../test-support/comm-worker-world.js';

const group = await initProcessGroup({ progress: 'worker', timeoutMs: 20_000 });
const count = 1 << 20;
await group.allReduce(new Float32Array(count)).wait();
const data = new Float32Array(count).fill(group.rank + 1);
const issuedAt = performance.timeOrigin + performance.now();
const work = group.allReduce(data);
const kernelEnd = busyFor(1500);
await work.wait();
const at = WorkerGroup.completedAt(work) ?? 0;
console.log(
  `rank ${group.rank} of ${group.size} over ${group.transport.kind} (${group.constructor.name}): sum ${data[0]} ${data[count - 1]}, done inside the kernel ${at > issuedAt && at < kernelEnd}`,
);
await group.close();
