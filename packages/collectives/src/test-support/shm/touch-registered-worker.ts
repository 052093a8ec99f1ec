// A rank of release-world.test.ts: `bytes` of registered memory, every page written (resident),
// then a barrier; returns what it wrote at the end, so nothing of it is optimized away.
import type { ProcessGroup } from '../../process-group.js';
import { runShmWorker } from '../../transports/shm/launch-threads.js';

void runShmWorker(async (group: ProcessGroup, bytes: number) => {
  const buffer = group.allocate('f32', bytes / 4) as Float32Array;
  buffer.fill(group.rank + 1);
  await group.barrier().wait();
  return buffer[buffer.length - 1]!;
});
