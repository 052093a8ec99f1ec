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
    // Blocking in the barrier held the thread >= 2 ms (BLOCK_MICROS) between two slices of every
    // op; yielding first holds it for the few microtasks the op takes to arrive. The median of 4
    // ops, so one preemption of this thread by a loaded machine does not decide it.
    const stalls = [...first.stalls].sort((a, b) => a - b);
    expect(stalls[1]! + stalls[2]!, `rank 0's longest stall per op: ${first.stalls}`).toBeLessThan(
      2,
    );
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
    // A turn runs the barrier's continuation; outside a progress turn it would spin and block the
    // thread for 2 ms there, in every turn until the peer came (40 turns of an op, 300 ms late).
    const stalls = [...first.stalls].sort((a, b) => a - b);
    expect(stalls[1]! + stalls[2]!, `rank 0's longest stall per op: ${first.stalls}`).toBeLessThan(
      2,
    );
  }, 60_000);
});
