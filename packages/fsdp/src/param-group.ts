import type { ProcessGroup } from '@webshard/collectives';
import type { Tensor } from '@webshard/tensor-core';
import type { ReduceScatterBucketer } from './bucketer.js';
import { gatherFull, type ReduceSettings } from './collectives.js';
import { FsdpStateError } from './errors.js';
import type { FlatParameter } from './flat-param.js';

/**
 * Where a unit is in a training step (fairscale's `TrainingState`). Transitions, asserted by
 * `FullyShardedDataParallel`: IDLE -> FORWARD -> IDLE on every forward; IDLE -> BACKWARD_PRE when
 * the unit's first output gradient arrives; BACKWARD_PRE -> BACKWARD_POST once all its gradients
 * are accumulated; both back to IDLE at the end of backward; IDLE -> SUMMON_FULL_PARAMS -> IDLE
 * around `summonFullParams`. During a backward a checkpoint's recomputation may take a unit from
 * BACKWARD_PRE or BACKWARD_POST through FORWARD to IDLE, and its next output gradient back to
 * BACKWARD_PRE ([Note: recomputation]).
 */
export type TrainingState =
  | 'IDLE'
  | 'FORWARD'
  | 'BACKWARD_PRE'
  | 'BACKWARD_POST'
  | 'SUMMON_FULL_PARAMS';

/**
 * [Note: recomputation]
 * Under activation checkpointing a unit's parameters are used again in backward: a checkpoint
 * inside the unit recomputes with the gathered parameters and runs a nested backward, and a
 * checkpoint around it calls the unit's forward again during the outer backward. Each nested
 * backward completes the parameters' gradients on its own (their accumulators have no other
 * edges there), so a unit called several times in one forward reduces once per call, as fairscale
 * does: the completed flat gradient is reduce-scattered and added to `shard.grad`, the unit
 * reshards, and the next output gradient to arrive (every one runs the pre-backward hook) gathers
 * again and attaches a fresh flat gradient. A forward during a backward is allowed in the backward
 * states and leaves the unit IDLE until its next pre-backward. Sums of reduce-scatters are the
 * reduce-scatter of the sum, so the result is that of one reduction, for more collectives.
 */
/** The states a unit may be in when a recomputation calls its forward or its pre-backward hook again. */
export const RECOMPUTE_STATES: readonly TrainingState[] = ['IDLE', 'BACKWARD_PRE', 'BACKWARD_POST'];

/**
 * The flat parameters of one unit, communicated together: `unshard` / `waitForUnshard` /
 * `reshard` around compute and `reduceGrads` after backward (PyTorch FSDP2's `FSDPParamGroup`).
 */
export class FsdpParamGroup {
  private gathers: Promise<void> | null = null;
  private readonly seen = new Map<FlatParameter, Set<Tensor>>();
  private readonly owner = new Map<Tensor, FlatParameter>();

  constructor(
    readonly unitName: () => string,
    readonly group: ProcessGroup,
    readonly flatParams: readonly FlatParameter[],
    /** How gradients are reduced; `setGradientDivideFactors` replaces it. */
    public settings: ReduceSettings,
  ) {
    for (const flat of flatParams) {
      this.seen.set(flat, new Set());
      for (const e of flat.entries) this.owner.set(e.param, flat);
    }
  }

  /** Whether every flat parameter is sharded and no gather is in flight. */
  get isSharded(): boolean {
    return this.gathers === null && this.flatParams.every((f) => f.shardedState === 'sharded');
  }

  /** Whether a gather was issued and has not completed. */
  get isGathering(): boolean {
    return this.gathers !== null;
  }

  /** Whether a gather was issued or the full parameters are in place. */
  get isUnshardedOrGathering(): boolean {
    return this.gathers !== null || this.flatParams.some((f) => f.shardedState === 'unsharded');
  }

  /** Issue the all-gathers of every sharded flat parameter (no-op when issued or done already). */
  unshard(): void {
    if (this.gathers !== null) return;
    const pending = this.flatParams
      .filter((f) => f.shardedState === 'sharded')
      .map((f) => gatherFull(this.group, f).then((full) => f.useFull(full)));
    if (pending.length === 0) return;
    this.gathers = Promise.all(pending).then(
      () => {
        this.gathers = null;
      },
      (error: unknown) => {
        this.gathers = null;
        throw error;
      },
    );
    // A prefetched gather may fail (a peer lost mid-forward) with no `waitForUnshard` left to
    // await it; the failure reaches the rank through the op that aborted the group, not as an
    // unhandled rejection. A waiter still gets the error from `this.gathers` itself.
    this.gathers.catch(() => {});
  }

  /** Wait for the gathers `unshard` issued; afterwards every parameter has its full data. */
  async waitForUnshard(): Promise<void> {
    if (this.gathers !== null) await this.gathers;
  }

  /**
   * Free the full parameters of `flats` (all by default). Synchronous, so it is called only when no
   * gather is in flight (after `waitForUnshard`).
   */
  reshard(flats: readonly FlatParameter[] = this.flatParams): void {
    if (this.gathers !== null) {
      throw new FsdpStateError(
        'reshard',
        this.unitName(),
        this.group.rank,
        'gathering',
        ['gathered', 'sharded'],
        'an all-gather is still in flight',
      );
    }
    for (const f of flats) if (f.shardedState === 'unsharded') f.freeFull();
  }

  /** Make the parameters' gradients views of each flat parameter's flat gradient. */
  attachGrads(): void {
    for (const f of this.flatParams) f.attachGrads();
  }

  /**
   * Note that `param`'s gradient is complete; returns its flat parameter when that was the last of
   * its entries (then its gradient can be reduced), null otherwise.
   */
  gradReady(param: Tensor, op: string, rank: number, state: TrainingState): FlatParameter | null {
    const flat = this.owner.get(param);
    if (flat === undefined) return null;
    if (state !== 'BACKWARD_PRE' && state !== 'BACKWARD_POST') {
      throw new FsdpStateError(
        op,
        this.unitName(),
        rank,
        state,
        ['BACKWARD_PRE', 'BACKWARD_POST'],
        `gradient of '${param.name}' arrived before the unit's pre-backward hook ran`,
      );
    }
    const seen = this.seen.get(flat)!;
    seen.add(param);
    if (seen.size !== flat.gradCount) return null;
    // Complete: counted afresh from here, since a checkpoint's recomputation completes it again
    // in the same backward ([Note: recomputation]).
    seen.clear();
    return flat;
  }

  /** Forget which gradients arrived (end of backward). */
  resetGradCounts(): void {
    for (const s of this.seen.values()) s.clear();
  }

  /**
   * Reshard `flat` and issue the reduce-scatter of its flat gradient now (so every rank issues it at
   * the same point of its step); the promise resolves once the averaged shard gradient is
   * accumulated into `flat.shard.grad`.
   */
  reduceGrads(flat: FlatParameter, bucketer: ReduceScatterBucketer): Promise<void> {
    this.reshard([flat]);
    const fullGrad = flat.detachGrads();
    if (fullGrad === null) return Promise.resolve();
    return bucketer.reduce(flat, fullGrad, this.settings);
  }
}
