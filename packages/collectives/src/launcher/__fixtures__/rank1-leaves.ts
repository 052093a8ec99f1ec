// Every rank joins and all-reduces once; then rank 1 exits with 0 without closing its group
// while the others all-reduce again, and report how that failed.
import { initProcessGroup } from '../../init-process-group.js';

const group = await initProcessGroup({ group: { timeoutMs: 30_000 } });
await group.allReduce(new Float32Array(4)).wait();
if (group.rank === 1) process.exit(0);
try {
  await group.allReduce(new Float32Array(4)).wait();
} catch (error) {
  console.log(`${(error as Error).name}: ${(error as Error).message}`);
  process.exitCode = 1;
}
await group.close();
