// Test helper: ranks as worker threads running a TypeScript module through tsx, and over it the
// shared suite's ranks (shm-transport.test.ts runs the cases, shm-failures.test.ts the failure
// scenarios; two files, so each stays short) and the fault-injection plans (fault-threads.ts).
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
// Through the package's `./testing` entry, as another transport's tests would.
import { type RankReport, SUITE_GROUP_OPTIONS, type SuiteJob } from '@webshard/collectives/testing';
import { type LaunchOptions, launchThreads } from '../../transports/shm/launch-threads.js';

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

/**
 * Runs `data` on `size` fresh worker threads, each running the TypeScript module `file` (beside
 * this one) with `runShmWorker`; a worker that died reports null.
 */
export async function runInThreads<T, R>(
  size: number,
  file: string,
  data: T,
  options: Omit<LaunchOptions, 'eval' | 'execArgv'>,
): Promise<(R | null)[]> {
  const outcomes = await launchThreads<T, R>(size, tsxBootstrap(file), data, {
    ...options,
    eval: true,
    execArgv: ['--conditions=@webshard/source'],
  });
  return outcomes.map((outcome) => (outcome.status === 'fulfilled' ? outcome.value : null));
}

/** Runs a suite job on `size` fresh worker threads; a worker that died reports null. */
export function runShmSuiteJob(size: number, job: SuiteJob): Promise<(RankReport | null)[]> {
  return runInThreads<SuiteJob, RankReport>(size, './shm-suite-worker.ts', job, {
    group: SUITE_GROUP_OPTIONS,
    capacity: 4096,
    // Small slots: the suite's sizes then take several rounds of the shared-memory schedules.
    slotBytes: 256,
  });
}
