// Starts the ranks of one shm-step.ts job as worker threads (tsx registered in each) and reduces
// their results to the slowest rank's: what bench/index.ts and bench/ssd-compare.ts measure with.
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { median } from '@webshard/bench';
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

/** Each field of `results` reduced by `pick` (the slowest rank's, or the median over rounds). */
function combine(results: StepResult[], pick: (values: number[]) => number): StepResult {
  const each = (key: keyof StepResult) => pick(results.map((r) => r[key]));
  return {
    stepMs: each('stepMs'),
    gatherMs: each('gatherMs'),
    exposedMs: each('exposedMs'),
    peakBytes: each('peakBytes'),
    registeredBytes: each('registeredBytes'),
    stagedOps: each('stagedOps'),
    bytesRead: each('bytesRead'),
    bytesWritten: each('bytesWritten'),
  };
}

/** Each number the slowest (largest) rank's. */
export function slowestRank(results: StepResult[]): StepResult {
  return combine(results, (values) => Math.max(...values));
}

/** Each number the median over `results` (one launch's each): see [Note: bench rounds, interleaved]. */
export function medianResult(results: StepResult[]): StepResult {
  return combine(results, median);
}
