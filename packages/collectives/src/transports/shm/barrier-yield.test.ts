import { describe, expect, it } from 'vitest';
import type {
  BarrierYieldJob,
  BarrierYieldReport,
} from '../../test-support/shm/barrier-yield-worker.js';
import { runInThreads } from '../../test-support/shm/shm-suite-run.js';

// [Note: barrier waits]: a barrier whose peers have not arrived lets the thread's queued work run
// before it spins or blocks. An all-reduce issued in backward and not awaited (DDP's overlapped
// bucket, FSDP's prefetched gather) used to spin, then block the thread in `Atomics.wait` for
// 2 ms of every barrier while its peer was still computing: at the MLP bench's 8 buckets, 5.4-5.9
// ms of every step's backward (measured), and the overlapped step 0.74x of `delayAllreduce`'s.
describe('an shm collective nobody awaits yet', () => {
  it('takes no time from the compute that runs before it is awaited, and completes when awaited', async () => {
    const job: BarrierYieldJob = { lateMs: 300, ops: 4, slices: 40, sliceMs: 0.25 };
    const reports = await runInThreads<BarrierYieldJob, BarrierYieldReport>(
      2,
      './barrier-yield-worker.ts',
      job,
      { group: { timeoutMs: 20_000 } },
    );
    const [first, second] = reports as [BarrierYieldReport, BarrierYieldReport];
    for (const report of [first, second]) {
      // Ranks hold 1 + op and 2 + op.
      expect(report.sums).toEqual([[3], [5], [7], [9]]);
    }
    // Blocking in the barrier held the thread in `Atomics.wait` >= 2 ms (BLOCK_MICROS) between
    // two slices of every op; yielding first, it does not wait there before the op is awaited.
    // (Timed inside `Atomics.wait`, not as gaps between slices: a loaded machine's scheduler
    // stretched those to 16-29 ms in CI.)
    expect(
      Math.max(...first.blocked),
      `rank 0's time in Atomics.wait per op: ${first.blocked}`,
    ).toBeLessThan(0.5);
  }, 60_000);

  it('sleeps through the progress turns the thread takes between its compute slices ([Note: progress turns])', async () => {
    const job: BarrierYieldJob = { lateMs: 300, ops: 4, slices: 40, sliceMs: 0.25, turns: true };
    const reports = await runInThreads<BarrierYieldJob, BarrierYieldReport>(
      2,
      './barrier-yield-worker.ts',
      job,
      { group: { timeoutMs: 20_000 } },
    );
    const [first, second] = reports as [BarrierYieldReport, BarrierYieldReport];
    for (const report of [first, second]) expect(report.sums).toEqual([[3], [5], [7], [9]]);
    // A turn runs the barrier's continuation; outside a progress turn it would spin and then
    // block the thread in `Atomics.wait` for 2 ms there (its peer is 300 ms late).
    expect(
      Math.max(...first.blocked),
      `rank 0's time in Atomics.wait per op: ${first.blocked}`,
    ).toBeLessThan(0.5);
  }, 60_000);
});
