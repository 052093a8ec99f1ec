// Starts the ranks of one shm-step.ts job as worker threads (tsx registered in each) and reduces
// their results to the slowest rank's: what bench/index.ts and bench/ssd-compare.ts measure with.
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { launchThreads } from '@webshard/collectives/node';
import type { StepJob, StepResult } from './step-job.js';

const tsx = pathToFileURL(
  createRequire(import.meta.url)
    .resolve('tsx/esm/api')
    .replace(/\.cjs$/, '.mjs'),
).href;
const worker = pathToFileURL(new URL('./shm-step.ts', import.meta.url).pathname).href;
const bootstrap = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(worker)}); })`;

/**
 * Run `job` on `world` ranks as threads over shm, their communication on their threads or on
 * their workers (`progress`); each number the slowest (largest) rank's.
 */
export async function runShmStep(
  world: number,
  job: StepJob,
  progress: 'thread' | 'worker' = 'thread',
): Promise<StepResult> {
  const outcomes = await launchThreads<StepJob, StepResult>(world, bootstrap, job, {
    eval: true,
    execArgv: ['--conditions=@webshard/source'],
    group: { timeoutMs: 120_000 },
    progress,
  });
  return slowestRank(
    outcomes.map((o) => {
      if (o.status !== 'fulfilled') throw new Error(`rank ${o.rank} failed: ${JSON.stringify(o)}`);
      return o.value;
    }),
  );
}

/** Each number the slowest (largest) rank's. */
export function slowestRank(results: StepResult[]): StepResult {
  const most = (key: keyof StepResult) => Math.max(...results.map((r) => r[key]));
  return {
    stepMs: most('stepMs'),
    gatherMs: most('gatherMs'),
    exposedMs: most('exposedMs'),
    peakBytes: most('peakBytes'),
    registeredBytes: most('registeredBytes'),
    stagedOps: most('stagedOps'),
    bytesRead: most('bytesRead'),
    bytesWritten: most('bytesWritten'),
  };
}

/** Each number the median over `results` (one launch's each): see [Note: bench rounds, interleaved]. */
export function medianResult(results: StepResult[]): StepResult {
  const middle = (key: keyof StepResult) => {
    const s = results.map((r) => r[key]).sort((a, b) => a - b);
    return s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
  };
  return {
    stepMs: middle('stepMs'),
    gatherMs: middle('gatherMs'),
    exposedMs: middle('exposedMs'),
    peakBytes: middle('peakBytes'),
    registeredBytes: middle('registeredBytes'),
    stagedOps: middle('stagedOps'),
    bytesRead: middle('bytesRead'),
    bytesWritten: middle('bytesWritten'),
  };
}
