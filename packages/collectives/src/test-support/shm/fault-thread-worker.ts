// One rank of a fault-injection run as a worker thread over shm ([Note: the fault-injection
// suite]). Its stop is a thread blocked in `Atomics.wait` for `stallMs`: it answers no poll, as a
// stopped process would, and comes back only after the survivors have failed.
import { runShmWorker } from '../../transports/shm/launch-threads.js';
import type { FaultPlan, FaultRankReport } from '../fault-plan.js';
import { runFaultRank } from '../fault-rank.js';

void runShmWorker<{ plan: FaultPlan; stallMs: number }, FaultRankReport | null>(
  async (group, { plan, stallMs }) =>
    runFaultRank(group, plan, {
      kill: () => process.exit(1),
      stop: () => {
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, stallMs);
      },
      closeSockets: () => {
        throw new Error('threads have no sockets');
      },
    }),
);
