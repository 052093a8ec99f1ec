// A rank started by launchThreads, through the node entry's runShmWorker: with the launch's
// `progress: 'worker'` its group is a WorkerGroup on the rank's communication worker. An
// all-reduce issued before a 1.5 s kernel that never yields: when did it complete, by the worker.
import { runShmWorker } from '../../comm-worker/shm-rank-worker.js';
import { WorkerGroup } from '../../comm-worker/worker-group.js';
import { allReduceDuringKernel } from '../comm-worker-world.js';

export interface WorkerProgressReport {
  readonly kind: string;
  readonly worker: boolean;
  readonly sum: number;
  readonly insideKernel: boolean;
}

void runShmWorker<null, WorkerProgressReport>(async (group) => {
  const { last, insideKernel } = await allReduceDuringKernel(group);
  return {
    kind: group.transport.kind,
    worker: group instanceof WorkerGroup,
    sum: last,
    insideKernel,
  };
});
