import type { RemovableHandle, RunningBackward, Tensor } from '@webshard/tensor-core';
import type { FlatParameter } from './flat-param.js';
import { RECOMPUTE_STATES } from './param-group.js';
import type { BorrowedParams } from './shared-params.js';
import type { FsdpSharedState, SharedUnit } from './state.js';

/**
 * What the backward hooks read and set of a unit; `FullyShardedDataParallel` is one. Named here, not
 * imported, so the wrapper that makes the hooks and this file do not name each other.
 */
export interface HookedUnit extends SharedUnit {
  readonly rank: number;
  readonly isRoot: boolean;
  readonly options: {
    readonly limitAllGathers: number;
    readonly reshardAfterForward: boolean;
    readonly disableReshardOnRoot: boolean;
  };
}

/**
 * One unit's backward hooks, steps 2 and 3 of [Note: FSDP and autograd]: the pre-backward hook its
 * outputs run (gather, prefetch, flat gradients attached, the end-of-backward callback queued) and
 * the post-accumulate hooks on its parameters (a completed flat parameter resharded and its
 * gradient reduce-scattered at once).
 */
export class BackwardHooks {
  private readonly hookHandles: RemovableHandle[] = [];
  private readonly hooked = new Set<FlatParameter>();

  constructor(
    private readonly unit: HookedUnit,
    /** The units whose parameters the unit's module also uses ([Note: parameters shared across units]). */
    private readonly borrowed: BorrowedParams,
    /** The root's shared state, made by its lazy init on the first forward (after the hooks). */
    private readonly shared: () => FsdpSharedState<HookedUnit>,
  ) {}

  /**
   * Hook the post-accumulate gradient of `flat`'s parameters, once, when it trains (a flat
   * parameter frozen at wrap time is hooked at the first forward after it is unfrozen).
   */
  hookGrads(flat: FlatParameter): void {
    if (!flat.requiresGrad || this.hooked.has(flat)) return;
    this.hooked.add(flat);
    for (const e of flat.entries) {
      this.hookHandles.push(e.param.registerPostAccumulateGradHook((p) => this.onGradReady(p)));
    }
  }

  /**
   * An output gradient arrived. The first of a backward gathers, prefetches and attaches flat
   * gradients; a later one (more outputs, more forwards, a checkpoint's recomputation) gathers again
   * and attaches again in case the unit reduced in between ([Note: recomputation]). All are no-ops
   * when nothing changed. A nested unit's output runs it once per forward call ([Note: outputs of
   * nested units]).
   */
  async preBackward(call: object, nested: boolean, running: RunningBackward): Promise<undefined> {
    const unit = this.unit;
    const shared = this.shared();
    if (!shared.runsPreBackward(call, nested)) return undefined;
    if (!shared.finalCallbackQueued) {
      shared.finalCallbackQueued = true;
      running.queueCallback(() => shared.finalizeBackward());
    }
    const first = !shared.preBackwardRan.has(unit);
    unit.assertState('pre-backward', first ? ['IDLE'] : RECOMPUTE_STATES);
    shared.preBackwardRan.add(unit);
    if (unit.trainingState === 'IDLE') unit.trainingState = 'BACKWARD_PRE';
    if (first) shared.recordBackward(unit);
    if (unit.ssdShards !== null) await unit.ssdShards.load();
    unit.paramGroup.unshard();
    if (first) {
      // The next unit whose backward has not run yet: one that already reduced would be gathered
      // again for nothing and held to the end of backward.
      const ahead = shared.nextInBackward(unit).filter((u) => !shared.preBackwardRan.has(u));
      await shared.prefetch(ahead, unit === shared.root, unit.options.limitAllGathers);
    }
    await unit.paramGroup.waitForUnshard();
    if (unit.ssdShards !== null) await unit.ssdShards.release();
    await this.borrowed.gather();
    unit.paramGroup.attachGrads();
    return undefined;
  }

  /**
   * A post-accumulate hook: a parameter's gradient is complete. While a reduction or a gather is
   * in flight, the hook gives it a turn of the thread's event loop before backward goes on (the
   * only time it moves during backward where the rank's communication runs on its own thread).
   */
  private async onGradReady(param: Tensor): Promise<void> {
    this.reduceIfComplete(param);
    const shared = this.shared();
    if (shared.inFlight()) await this.unit.paramGroup.group.progress();
  }

  private reduceIfComplete(param: Tensor): void {
    const unit = this.unit;
    const flat = unit.paramGroup.gradReady(param, 'post-backward', unit.rank, unit.trainingState);
    if (flat === null) return;
    unit.trainingState = 'BACKWARD_POST';
    if (!unit.requireGradSync) {
      // Inside noSync the gradient stays full and unreduced; the full parameters are freed as
      // after forward (fairscale frees them when resharding after forward, and keeps the root's).
      const keepsFull = unit.isRoot && unit.options.disableReshardOnRoot;
      if (unit.options.reshardAfterForward && !keepsFull) unit.paramGroup.reshard([flat]);
      return;
    }
    const shared = this.shared();
    shared.addReduction(unit.paramGroup.reduceGrads(flat, shared.bucketer));
  }
}
