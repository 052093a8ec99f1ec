// A rank started by webshard-run: joins over the backend in argv[2] from the torchrun
// environment, sums rank + 1 over the world and prints it.
import { initProcessGroup } from '../../rendezvous/init-process-group.js';

const group = await initProcessGroup({
  backend: process.argv[2] as 'tcp' | 'ws',
  timeoutMs: 20_000,
});
const data = Float32Array.from([group.rank + 1, 1]);
await group.allReduce(data).wait();
console.log(`rank ${group.rank} of ${group.size}: sum ${data[0]}, count ${data[1]}`);
await group.close();
