import { runTransportSuite } from '../../testing/transport-suite.js';
import { runJobInChildren, runJobInProcess } from './network-world.js';

// The cases and most failures run with every rank in this process (real sockets, one event
// loop: fast); the kill scenario runs ranks as child processes so a rank can be SIGKILLed.
runTransportSuite('tcp', {
  sizes: [1, 2, 3, 4],
  failureSizes: [2, 3],
  run(size, job) {
    if (job.kind === 'failure' && job.scenario === 'kill')
      return runJobInChildren('tcp', size, job);
    return runJobInProcess('tcp', size, job);
  },
});
