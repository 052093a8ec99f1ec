import { runTransportSuite } from '../suites/transport-suite.js';
import { runWorkerSuiteJob } from '../test-support/comm-worker-world.js';

// The shared suite over tcp with each rank's communication on its worker (`initProcessGroup`
// with `progress: 'worker'`): every case (tensors, send/recv, sub-groups included) and failure
// scenario, through the `ProcessGroup` a rank gets; the kill scenarios with ranks as child
// processes. `kill-mid-ring` is left out: its victim dies once its rank's thread saw 16 KiB
// arrive through `transport.recv`, which on this path runs on the worker (comm-worker.test.ts
// ends a worker in the middle of a 4 MiB all-reduce instead). ws: worker-suite-ws.test.ts.
runTransportSuite('tcp on the communication worker', {
  sizes: [1, 2, 3],
  failureSizes: [2],
  scenarioSizes: { 'kill-mid-ring': [], 'kill-rank-0': [3] },
  run: (size, job) => runWorkerSuiteJob('tcp', size, job),
});
