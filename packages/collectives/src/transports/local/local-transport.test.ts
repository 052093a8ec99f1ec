import { runSuiteJob, SUITE_GROUP_OPTIONS } from '../../suites/suite.js';
import { runTransportSuite } from '../../suites/transport-suite.js';
import { ProcessGroup } from '../../process-group.js';
import { LocalHub } from './local-transport.js';

runTransportSuite('local', {
  sizes: [1, 2, 3, 4, 8],
  failureSizes: [2, 4],
  async run(size, job) {
    const hub = new LocalHub(size);
    const groups = hub.transports.map((t) => ProcessGroup.fromTransport(t, SUITE_GROUP_OPTIONS));
    return Promise.all(
      groups.map((group) => runSuiteJob(group, job, { die: () => hub.kill(group.rank) })),
    );
  },
});
