import type { FaultPlan, FaultRankReport } from '../fault-plan.js';
import { faultGroupOptions } from '../fault-rank.js';
import { runInThreads } from './shm-suite-run.js';

/**
 * Runs a plan with its ranks as worker threads over shm. With `sharedMemory` the world group's
 * collectives run in the shared arena (a fault then strikes before an op: nothing is received
 * there); without, they run on the byte rings. A stopped thread blocks for `stallMs`.
 */
export function runPlanInThreads(
  plan: FaultPlan,
  stallMs: number,
  sharedMemory: boolean,
): Promise<(FaultRankReport | null)[]> {
  return runInThreads<{ plan: FaultPlan; stallMs: number }, FaultRankReport | null>(
    plan.size,
    './fault-thread-worker.ts',
    { plan, stallMs },
    { group: { ...faultGroupOptions(plan), sharedMemory }, slotBytes: 4096 },
  );
}
