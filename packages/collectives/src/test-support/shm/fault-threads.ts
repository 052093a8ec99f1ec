import { launchThreads } from '../../transports/shm/launch-threads.js';
import type { FaultPlan, FaultRankReport } from '../fault-plan.js';
import { faultGroupOptions } from '../fault-rank.js';
import { tsxBootstrap } from './shm-suite-run.js';

const worker = tsxBootstrap('./fault-thread-worker.ts');

/**
 * Runs a plan with its ranks as worker threads over shm. With `sharedMemory` the world group's
 * collectives run in the shared arena (a fault then strikes before an op: nothing is received
 * there); without, they run on the byte rings. A stopped thread blocks for `stallMs`.
 */
export async function runPlanInThreads(
  plan: FaultPlan,
  stallMs: number,
  sharedMemory: boolean,
): Promise<(FaultRankReport | null)[]> {
  const outcomes = await launchThreads<
    { plan: FaultPlan; stallMs: number },
    FaultRankReport | null
  >(
    plan.size,
    worker,
    { plan, stallMs },
    {
      eval: true,
      execArgv: ['--conditions=@webshard/source'],
      group: { ...faultGroupOptions(plan), sharedMemory },
      slotBytes: 4096,
    },
  );
  return outcomes.map((outcome) => (outcome.status === 'fulfilled' ? outcome.value : null));
}
