import type { ProcessGroup } from '../process-group.js';
import { joinShm } from '../transports/shm/join-shm.js';
import { runShmWorker as runOn, type ShmWorkerData } from '../transports/shm/launch-threads.js';
import { WorkerGroup } from './worker-group.js';

/**
 * The body of a worker started by `launchThreads` (the `@webshard/collectives/node` entry's
 * `runShmWorker`): joins the world on the rank's thread, or, for a launch with `progress:
 * 'worker'`, through the rank's communication worker, which attaches its end of the rings
 * ([Note: the communication worker handshake]); then runs `main(group, data)` as
 * transports/shm/launch-threads.ts's `runShmWorker` does.
 */
export function runShmWorker<T, R>(
  main: (group: ProcessGroup, data: T) => Promise<R>,
): Promise<void> {
  return runOn(main, (init: ShmWorkerData<T>) =>
    init.progress === 'worker'
      ? WorkerGroup.start({ shm: { handle: init.handle, rank: init.rank }, group: init.options })
      : joinShm(init.handle, init.rank, init.options),
  );
}
