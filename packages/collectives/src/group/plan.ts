import type { OperandStaging } from '../operand-staging.js';
import { TwoLevelPlan } from '../two-level/two-level-plan.js';
import type { CollectivePlan, PlanOptions } from './collective-plan.js';
import type { GroupView } from './op-context.js';
import { RingPlan } from './ring-plan.js';
import { SharedArenaPlan } from './shared-arena-plan.js';

/**
 * [Note: one plan per group]
 * A group picks how it runs its collectives once, when it is built, from what every rank of it
 * sees alike: its transport, whether it is that transport's world group, its size and the
 * `sharedMemory` option. The world group of nodes of threads runs in two levels (`TwoLevelPlan`,
 * [Note: two-level collectives]); the world group of an `shm` transport of several ranks runs
 * through the shared arena (`SharedArenaPlan`); every other group runs over messages (`RingPlan`:
 * direct exchange of small messages, the segmented ring, on `tcp` over registered memory). Within
 * a plan, what may differ from rank to rank (where a registered operand lies) is decided from the
 * offsets the ranks exchanged with the fingerprint, never from this rank's own, so all ranks take
 * the same schedule.
 *
 * `world`: whether the group is its transport's world group (the one `fromTransport` makes).
 */
export function choosePlan(
  group: GroupView,
  options: PlanOptions,
  world: boolean,
  /** Host arrays for tensor operands: see [Note: operand staging]. */
  staging: OperandStaging,
): CollectivePlan {
  const twoLevel = TwoLevelPlan.for(group, world, options, staging);
  if (twoLevel !== null) return twoLevel;
  const arena = group.transport.sharedArena;
  if (arena !== undefined && options.sharedMemory && world && group.size > 1)
    return new SharedArenaPlan(group, arena, options, staging);
  return new RingPlan(group, options, staging);
}
