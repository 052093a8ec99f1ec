// A rank of the shared transport suite over shm (started by shm-transport.test.ts).
import { runSuiteJob, type SuiteJob } from '../../suites/suite.js';
import { runShmWorker } from '../../transports/shm/launch-threads.js';

void runShmWorker((group, job: SuiteJob) =>
  runSuiteJob(group, job, {
    // A crash: the worker thread ends without returning; the parent reports it to the others.
    die: () => process.exit(1),
  }),
);
