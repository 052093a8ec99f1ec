// Every rank joins with `initProcessGroup()` and all-reduces once; then rank 1 throws while the
// others wait in a second all-reduce, and report how it failed.
import { initProcessGroup } from '../../init-process-group.js';

const group = await initProcessGroup({ group: { timeoutMs: 30_000 } });
await group.allReduce(new Float32Array(4)).wait();
if (group.rank === 1) throw new RangeError('rank 1 gives up');
try {
  await group.allReduce(new Float32Array(4)).wait();
} catch (error) {
  console.log(`${(error as Error).name}: ${(error as Error).message}`);
  process.exitCode = 1;
}
