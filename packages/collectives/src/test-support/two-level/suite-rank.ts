// A rank of the shared collective suite on a node of several, started as a thread by `launch`
// (two-level-suite.test.ts): joins the two-level world, runs the job from WEBSHARD_SUITE_JOB,
// prints its report. `die()` ends the thread with code 1, as a crash would.
import { initProcessGroup } from '../../init-process-group.js';
import { runSuiteJob, SUITE_GROUP_OPTIONS, type SuiteJob } from '../../suites/suite.js';

const job = JSON.parse(process.env.WEBSHARD_SUITE_JOB ?? '') as SuiteJob;
const group = await initProcessGroup({ group: SUITE_GROUP_OPTIONS, timeoutMs: 30_000 });
const report = await runSuiteJob(group, job, { die: () => process.exit(1) });
process.stdout.write(`@@report ${JSON.stringify(report)}\n`);
await group.close();
