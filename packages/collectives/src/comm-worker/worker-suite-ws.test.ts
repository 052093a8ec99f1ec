import { runTransportSuite } from '../suites/transport-suite.js';
import { runWorkerSuiteJob } from '../test-support/comm-worker-world.js';

// worker-suite.test.ts over ws: the same suite, at 2 ranks (a file of its own, so the two run in
// parallel under vitest). `kill-mid-ring` is left out for the reason given there.
runTransportSuite('ws on the communication worker', {
  sizes: [2],
  failureSizes: [2],
  scenarioSizes: { 'kill-mid-ring': [], 'kill-rank-0': [] },
  run: (size, job) => runWorkerSuiteJob('ws', size, job),
});
