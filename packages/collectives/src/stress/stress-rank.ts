// One rank of a stress run ([Note: the stress harness] in cli.ts), started by the launcher as a
// thread (shm, two-level) or a process (tcp, ws): joins its world, runs its part of the program
// drawn from the job's seed, prints its report, closes.
import { initProcessGroup } from '../init-process-group.js';
import { JOB_VARIABLE, REPORT_MARK, type StressJob } from './job.js';
import { generateProgram } from './program.js';
import { runStressRank } from './run-rank.js';

const job = JSON.parse(process.env[JOB_VARIABLE] ?? '') as StressJob;
const group = await initProcessGroup({
  backend: job.transport === 'ws' ? 'ws' : 'tcp',
  group: { timeoutMs: job.rank.timeoutMs },
  timeoutMs: 60_000,
  ...(job.progress === 'worker' ? { progress: 'worker' as const } : {}),
});
const program = generateProgram(job.seed, group.size, job.program);
const report = await runStressRank(group, program, job.rank);
process.stdout.write(`${REPORT_MARK}${JSON.stringify(report)}\n`);
try {
  await group.close();
} catch {
  // After a mismatch or an error the world is aborted: closing it may fail, the report is out.
}
