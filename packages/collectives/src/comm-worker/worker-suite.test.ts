import { killsARank, runSuiteJob, SUITE_GROUP_OPTIONS } from '../suites/suite.js';
import { runTransportSuite } from '../suites/transport-suite.js';
import { createCommWorkerWorld } from '../test-support/comm-worker-world.js';

// The shared suite over tcp with each rank's communication on its worker: every case (tensors,
// send/recv, sub-groups included) and failure scenario, through the `ProcessGroup` a rank gets.
runTransportSuite('tcp on the communication worker', {
  sizes: [1, 2, 3],
  failureSizes: [2],
  async run(size, job) {
    if (killsARank(job)) return [];
    const world = await createCommWorkerWorld(size, SUITE_GROUP_OPTIONS);
    try {
      return await Promise.all(
        world.ranks.map((group) =>
          runSuiteJob(group, job, {
            die: () => {
              throw new Error('in-process ranks cannot die; run the kill scenario in children');
            },
          }),
        ),
      );
    } finally {
      await world.close();
    }
  },
});
