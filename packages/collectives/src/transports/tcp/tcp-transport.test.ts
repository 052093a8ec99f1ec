import { killsARank } from '../../suites/suite.js';
import { runTransportSuite } from '../../suites/transport-suite.js';
import { runJobInChildren, runJobInProcess } from '../../test-support/network-world.js';

// The cases and most failures run with every rank in this process (real sockets, one event
// loop: fast); the kill scenarios run ranks as child processes so a rank can be SIGKILLed.
runTransportSuite('tcp', {
  sizes: [1, 2, 3, 4],
  failureSizes: [2, 3],
  // Child processes take seconds to start: the newer kill scenarios run at one size.
  scenarioSizes: { 'kill-mid-ring': [3], 'kill-rank-0': [3] },
  run(size, job) {
    if (killsARank(job)) return runJobInChildren('tcp', size, job);
    return runJobInProcess('tcp', size, job);
  },
});
