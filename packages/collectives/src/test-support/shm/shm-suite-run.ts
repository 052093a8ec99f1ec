// Test helper: the shared suite's ranks as worker threads (shm-transport.test.ts runs the cases,
// shm-failures.test.ts the failure scenarios; two files, so each stays short).
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
// Through the package's `./testing` entry, as another transport's tests would.
import { type RankReport, SUITE_GROUP_OPTIONS, type SuiteJob } from '@webshard/collectives/testing';
import { launchThreads } from '../../transports/shm/launch-threads.js';

const tsx = pathToFileURL(
  createRequire(import.meta.url)
    .resolve('tsx/esm/api')
    .replace(/\.cjs$/, '.mjs'),
).href;

/** Worker code that registers tsx, then imports the TypeScript module `file` (beside this one). */
export function tsxBootstrap(file: string): string {
  const worker = pathToFileURL(new URL(file, import.meta.url).pathname).href;
  return `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(worker)}); })`;
}

const suiteWorker = tsxBootstrap('./shm-suite-worker.ts');

/** Runs a suite job on `size` fresh worker threads; a worker that died reports null. */
export async function runShmSuiteJob(size: number, job: SuiteJob): Promise<(RankReport | null)[]> {
  const outcomes = await launchThreads<SuiteJob, RankReport>(size, suiteWorker, job, {
    eval: true,
    execArgv: ['--conditions=@webshard/source'],
    group: SUITE_GROUP_OPTIONS,
    capacity: 4096,
    // Small slots: the suite's sizes then take several rounds of the shared-memory schedules.
    slotBytes: 256,
  });
  return outcomes.map((outcome) => (outcome.status === 'fulfilled' ? outcome.value : null));
}
