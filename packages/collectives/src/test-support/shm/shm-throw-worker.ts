// A rank that throws while the others wait in an all-reduce (for shm-transport.test.ts).
import { runShmWorker } from '../../transports/shm/launch-threads.js';

void runShmWorker(async (group) => {
  if (group.rank === 2) {
    await group.allReduce(new Float32Array(4)).wait();
    throw new RangeError('rank 2 gives up');
  }
  try {
    await group.allReduce(new Float32Array(4)).wait();
    await group.allReduce(new Float32Array(4)).wait();
    return 'completed';
  } catch (error) {
    return `${(error as Error).name}: ${(error as Error).message}`;
  }
});
