// A rank started by webshard-run: joins from the torchrun environment (over the backend in
// argv[2] as a process; over the node's shared memory as a thread), sums rank + 1 over the world
// and prints it with the transport it ran on.
import { initProcessGroup } from '../../init-process-group.js';

const group = await initProcessGroup({
  backend: process.argv[2] as 'tcp' | 'ws',
  timeoutMs: 20_000,
});
const data = Float32Array.from([group.rank + 1, 1]);
await group.allReduce(data).wait();
console.log(
  `rank ${group.rank} of ${group.size} over ${group.transport.kind}: sum ${data[0]}, count ${data[1]}`,
);
await group.close();
