// One rank of the shared collective suite in its own process: joins through the torchrun
// environment, runs the job given as JSON, prints its report, and dies by SIGKILL when told. It
// closes once its stdin closes.
import { ProcessGroup } from '../process-group.js';
import { connectNetworkTransport, type NetworkBackend } from '../connect-transport.js';
import { initProcessGroup, type ProgressMode } from '../init-process-group.js';
import { runSuiteJob, SUITE_GROUP_OPTIONS, type SuiteJob } from '../suites/suite.js';

const [backend, jobText, shape, survivors, progress] = process.argv.slice(2) as [
  NetworkBackend,
  string,
  string,
  'stay' | 'leave' | undefined,
  ProgressMode | undefined,
];
const job = JSON.parse(jobText) as SuiteJob;
// 'relayed': only rank 0 accepts connections, the others pair up through it (as browsers do).
const listen = shape === 'relayed' ? process.env.RANK === '0' : undefined;
const group =
  progress === 'worker'
    ? await initProcessGroup({ backend, timeoutMs: 20_000, progress, group: SUITE_GROUP_OPTIONS })
    : ProcessGroup.fromTransport(
        await connectNetworkTransport({ backend, timeoutMs: 20_000, listen }),
        SUITE_GROUP_OPTIONS,
      );
const report = await runSuiteJob(group, job, { die: () => process.kill(process.pid, 'SIGKILL') });
process.stdout.write(`@@report ${JSON.stringify(report)}\n`);
// Stay connected until the parent closes stdin (every rank has reported): a survivor that closed
// at once could be seen gone by a slower survivor before the death it is meant to report. With
// 'leave', go at once, as the ranks of a real job do after an error.
if (survivors !== 'leave') {
  process.stdin.resume();
  await new Promise((resolve) => process.stdin.once('close', resolve));
}
await group.close();
await group.transport.close();
process.exit(0);
