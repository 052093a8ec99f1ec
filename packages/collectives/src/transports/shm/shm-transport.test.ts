import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
// Through the package's `./testing` entry, as another transport's tests would.
import {
  type RankReport,
  runTransportSuite,
  SUITE_GROUP_OPTIONS,
  type SuiteJob,
} from '@webshard/collectives/testing';
import { launchThreads } from './launch-threads.js';

// Workers run the TypeScript sources through tsx, registered by a one-line bootstrap.
const tsx = pathToFileURL(
  createRequire(import.meta.url)
    .resolve('tsx/esm/api')
    .replace(/\.cjs$/, '.mjs'),
).href;
const worker = pathToFileURL(new URL('./shm-suite-worker.ts', import.meta.url).pathname).href;
const bootstrap = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(worker)}); })`;

async function run(size: number, job: SuiteJob): Promise<(RankReport | null)[]> {
  const outcomes = await launchThreads<SuiteJob, RankReport>(size, bootstrap, job, {
    eval: true,
    execArgv: ['--conditions=@webshard/source'],
    group: SUITE_GROUP_OPTIONS,
    capacity: 4096,
    // Small slots: the suite's sizes then take several rounds of the shared-memory schedules.
    slotBytes: 256,
  });
  return outcomes.map((outcome) => (outcome.status === 'fulfilled' ? outcome.value : null));
}

runTransportSuite('shm', { sizes: [1, 2, 3, 4], failureSizes: [2, 3, 4], run });

describe('launchThreads', () => {
  it('reports a worker that throws as rejected and aborts the others with its message', async () => {
    const code = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(
      pathToFileURL(new URL('./shm-throw-worker.ts', import.meta.url).pathname).href,
    )}); })`;
    const outcomes = await launchThreads<null, string>(3, code, null, {
      eval: true,
      execArgv: ['--conditions=@webshard/source'],
      group: { timeoutMs: 20_000 },
    });
    expect(outcomes[2]).toEqual({
      rank: 2,
      status: 'rejected',
      error: {
        name: 'RangeError',
        message: 'rank 2 gives up',
        // The stack comes along, so a failure's line is on record (the bench prints outcomes).
        stack: expect.stringMatching(
          /^RangeError: rank 2 gives up\n\s+at .*shm-throw-worker\.ts:7/,
        ),
      },
    });
    for (const outcome of outcomes.slice(0, 2)) {
      expect(outcome.status).toBe('fulfilled');
      expect((outcome as { value: string }).value).toMatch(
        // Inside the second all-reduce, or before it when the abort came first.
        /^GroupAbortedError: \[allReduce\] rank [01] \(seq 1\): (group aborted: rank 2's worker failed: RangeError: rank 2 gives up \(reported by rank 2\)|the group was aborted earlier by rank 2 \(error\): rank 2's worker failed: RangeError: rank 2 gives up)$/,
      );
    }
  });
});
