import { runTransportSuite } from '@webshard/collectives/testing';
import { runShmSuiteJob } from '../../test-support/shm/shm-suite-run.js';

// The shared suite's failure scenarios over shm (the cases are in shm-transport.test.ts). Starting
// workers dominates each scenario (2-3 s on a loaded machine): the newer ones run at one size.
const oneSize = [3];
runTransportSuite('shm', {
  sizes: [],
  failureSizes: [2, 3, 4],
  scenarioSizes: {
    'mismatch-reduce-op': oneSize,
    'mismatch-root': oneSize,
    'kill-mid-ring': oneSize,
    'kill-rank-0': oneSize,
  },
  run: runShmSuiteJob,
});
