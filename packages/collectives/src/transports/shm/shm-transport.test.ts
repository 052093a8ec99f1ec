import { describe, expect, it } from 'vitest';
import { runTransportSuite } from '@webshard/collectives/testing';
import { launchThreads } from './launch-threads.js';
import { runShmSuiteJob, tsxBootstrap } from '../../test-support/shm/shm-suite-run.js';

// Workers run the TypeScript sources through tsx, registered by a one-line bootstrap. The failure
// scenarios are in shm-failures.test.ts.
runTransportSuite('shm', { sizes: [1, 2, 3, 4], failureSizes: [], run: runShmSuiteJob });

describe('launchThreads', () => {
  it('reports a worker that throws as rejected and aborts the others with its message', async () => {
    const outcomes = await launchThreads<null, string>(
      3,
      tsxBootstrap('./shm-throw-worker.ts'),
      null,
      {
        eval: true,
        execArgv: ['--conditions=@webshard/source'],
        group: { timeoutMs: 20_000 },
      },
    );
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

  it('keeps a thread alive while a receive on the transport is pending', async () => {
    // A pending Atomics.waitAsync alone does not: rank 1 exited with code 0 mid-receive.
    const outcomes = await launchThreads<null, string>(
      2,
      tsxBootstrap('./shm-raw-recv-worker.ts'),
      null,
      { eval: true, execArgv: ['--conditions=@webshard/source'], group: { timeoutMs: 20_000 } },
    );
    expect(outcomes).toEqual([
      { rank: 0, status: 'fulfilled', value: 'sent' },
      { rank: 1, status: 'fulfilled', value: 'received 7,8,9' },
    ]);
  });
});
