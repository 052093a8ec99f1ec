import type { ProcessGroup } from '@webshard/collectives';
import type { Tensor } from '@webshard/tensor-core';
import { type AverageStats, CompressedAverager } from './compressed-average.js';
import type { CompressedAverageOptions } from './compressed-average.js';
import { FlatLayout, readFlat, writeFlat } from './flat-params.js';
import { type FragmentMerge, mergeLanded } from './fragment-merge.js';
import { dealFragments, fragmentDue } from './fragment-schedule.js';
import { OuterOptimizer, type OuterOptimizerOptions } from './outer-optimizer.js';

/** Streaming DiLoCo's mixing factor alpha with an overlap: half local, half global (the paper's). */
export const DEFAULT_STREAM_MIXING = 0.5;

/*
 * [Note: streamed fragments]
 * Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512), as `fragments`, `overlap` and
 * `mixing` of `DiLoCo`:
 * - Fragments: the paper's strided pattern (fragment p holds layers p, p + F, p + 2F, ...) rather
 *   than its sequential one (runs of consecutive layers), because the paper found strided a
 *   little better: every fragment spans the whole depth, so no part of the network is always the
 *   stalest. This package sees tensors, not layers, and a transformer layer's tensors differ in
 *   size by 100x, so tensor i to fragment i mod F made fragments of 55, 4 and 45 % of the trainer's
 *   GPT at F = 3 (a layer's big matrices fell on two fragments). So the tensors are dealt in
 *   parameter order, each to the fragment that holds the fewest elements so far (ties: the lowest
 *   index): still strided through the depth, with fragments within about a tensor of 1/F of the
 *   model, which is what sets the peak bandwidth.
 * - Schedule: fragment p syncs after the inner steps s with s mod H = floor(p H / F) (s counted
 *   from 1): fragment 0 at H, 2H, ... as plain DiLoCo, fragment p p H / F steps later in each
 *   period. So at most one fragment starts at any step, and one sync's bytes are 1/F of the
 *   model's (the paper's lower peak bandwidth).
 * - Overlap tau: a fragment's pseudo-gradient global - local is taken and its average issued after
 *   step s, and the next tau inner steps run while it is on the wire; after step s + tau the
 *   average is awaited (usually long done), the fragment's outer optimizer steps its global copy,
 *   and the local fragment takes it: by the paper's merge, alpha x local + (1 - alpha) x global
 *   (`merge: 'mix'`; it found alpha = 0.5 best, our default with an overlap), which keeps part of
 *   what the tau steps trained; with `topk` by `carry` (the new global plus the steps since the
 *   issue), since mixing counts twice what its error feedback keeps ([Note: merging a landed
 *   fragment], with the measurements). Without an overlap there is no newer local work, and
 *   every merge is DiLoCo's replacement: with F = 1 and tau = 0 every bit is plain DiLoCo's
 *   (tested). tau is at most floor(H / F), so a
 *   fragment lands before (or at the step where) the next starts: one fragment on the wire.
 * - Progress: a rank's thread runs the kernels, and a collective moves only when the thread turns
 *   the event loop. After each inner step with a fragment in flight, `afterInnerStep` yields one
 *   turn (`setImmediate`), so every step lets the transport deliver what arrived and send the next
 *   hop; an average of k hops needs about k steps to finish unseen (the trainer README has the
 *   measurement on broadband-20).
 * - Each fragment's averages run on a group of its own (`newGroup` of every rank, F of them, made
 *   at `create` and at each `regroup`): a group's calls complete in issue order, and a fragment's
 *   average is several calls (int8's sends and receives, then its all-gather), issued as the
 *   previous ones finish, in the background. On the caller's group they would interleave with the
 *   training loop's own collectives in a different order on each rank (the trainer's loss mean met
 *   an int8 all-gather: a `CollectiveMismatchError`), and on one group shared by the fragments two
 *   fragments' averages would; on their own tags they cannot.
 * - `syncAll` (the end of training, an elastic world's sync points) issues every fragment's average
 *   at once and then lands them in order, so it waits about one average's latency, not F of them
 *   one after another (on broadband-20, 40 ms one way, F = 5 topk averages took some 300 ms in
 *   turn). A failure there leaves every fragment not yet landed as if never issued: its residuals
 *   go back to what they were before the issue. At the last step (`afterInnerStep({ last })`)
 *   the fragment issued with that step is not issued a second time: nothing trained after its
 *   issue, so it lands beside the others, without the mixing, in the same wait. Landing it first
 *   and issuing it again cost one more average's latency at the end of every run (the trainer's
 *   last step, 221 ms against loopback's 46 on broadband-20) and gave that fragment a second
 *   outer step on a pseudo-gradient of what the mixing had kept, momentum and all. `outerSync`,
 *   which the caller may run after steps it did not count, issues every fragment.
 * - Each fragment has its own outer optimizer (momentum buffer) and its own averager, so error
 *   feedback (int8, int4, bf16 residuals; topk's decaying buffer) is per fragment: what a
 *   fragment's compression dropped goes out with that fragment's next sync.
 * - A fragment in flight when the group fails (a member lost): awaiting it throws, and nothing of
 *   it is applied (its global copy, momentum and residuals stay). At `regroup` the fragment in
 *   flight, settled or not, is dropped on every survivor without waiting for it: its residuals go
 *   back to what they were before it was issued, and its local parameters keep what they trained,
 *   so the dropped pseudo-gradient is part of the fragment's next one, sent in the new group at
 *   its next turn (a regroup never applies a half-averaged fragment, and never waits on the old
 *   group).
 */

/** Every rank of `group` as a group of its own (its collectives on separate tags). */
function ownGroup(group: ProcessGroup): ProcessGroup {
  return group.newGroup(Array.from({ length: group.size }, (_, r) => r))!;
}

/** How `StreamedFragments` runs. */
export interface StreamOptions {
  readonly group: ProcessGroup;
  /** H. */
  readonly innerSteps: number;
  /** F, in [1, number of tensors]. */
  readonly fragments: number;
  /** tau, in [0, floor(H / F)]. */
  readonly overlap: number;
  /** How a landed fragment meets the local parameters ([Note: merging a landed fragment]). */
  readonly merge: FragmentMerge;
  /** alpha, in [0, 1), of `merge: 'mix'`. */
  readonly mixing: number;
  readonly outer: OuterOptimizerOptions;
  readonly codec: CompressedAverageOptions;
}

/**
 * One fragment: its tensors, its global copy (contiguous), outer optimizer and averager, whose
 * collectives run on a group of the fragment's own.
 */
interface Fragment {
  readonly index: number;
  readonly tensors: readonly number[];
  readonly global: Float32Array;
  readonly outer: OuterOptimizer;
  averager: CompressedAverager;
  /** The inner step after which its last sync was issued (-1: none since the load). */
  issuedAt: number;
}

/** The fragment on the wire. */
interface InFlight {
  readonly fragment: Fragment;
  /** The inner step after which it was issued. */
  readonly issuedAt: number;
  /** The pseudo-gradient, averaged in place. */
  readonly delta: Float32Array;
  /** The fragment's local parameters at the issue, for `merge: 'carry'` with an overlap, else null. */
  readonly atIssue: Float32Array | null;
  readonly result: Promise<AverageStats>;
  /** The fragment's residual before the issue, restored if it is dropped. */
  readonly residualBefore: Float32Array | null;
  /** `performance.now()` at the issue, and when this rank saw the average done (or -1). */
  readonly issuedMs: number;
  doneMs: number;
}

/** What one step of the schedule did. */
export interface StreamStepResult {
  /** The fragment whose outer step was applied after this step, or null. */
  readonly applied: number | null;
  /** Bytes sent by the syncs that completed. */
  readonly bytesSent: number;
  /**
   * Milliseconds from the issue of the fragment that landed to when this rank saw its average
   * done (0 when none landed): the sync's wall time.
   */
  readonly syncMs: number;
  /** Of those, the milliseconds landing waited for the average: the part the overlap did not hide. */
  readonly waitMs: number;
}

/** What landing a fragment measured. */
interface Landed {
  readonly bytesSent: number;
  readonly syncMs: number;
  readonly waitMs: number;
}

const yieldTurn: () => Promise<void> =
  typeof setImmediate === 'function'
    ? () => new Promise((resolve) => setImmediate(resolve))
    : () => new Promise((resolve) => setTimeout(resolve, 0));

/**
 * Streaming DiLoCo's outer syncs over fragments of the parameters ([Note: streamed fragments]).
 * `DiLoCo` owns one when `fragments` or `overlap` is given; every method is called on every rank
 * in the same order.
 */
export class StreamedFragments {
  private readonly list: Fragment[];
  private readonly layout: FlatLayout;
  private flight: InFlight | null = null;
  private stepsBefore = 0;

  constructor(
    private readonly params: readonly Tensor[],
    global: Float32Array,
    private options: StreamOptions,
  ) {
    const sizes = params.map((p) => p.size);
    this.layout = new FlatLayout(sizes);
    this.list = dealFragments(sizes, options.fragments).map((tensors, index) => {
      const fragment: Fragment = {
        index,
        tensors,
        global: new Float32Array(tensors.reduce((sum, t) => sum + params[t]!.size, 0)),
        outer: new OuterOptimizer(options.outer, options.group.rank),
        // topk tiles each tensor of the fragment's own values ([Note: top-k tiles]).
        averager: new CompressedAverager(
          ownGroup(options.group),
          options.codec.shapes === undefined
            ? options.codec
            : { ...options.codec, shapes: tensors.map((t) => params[t]!.shape) },
        ),
        issuedAt: -1,
      };
      return fragment;
    });
    this.load(global);
  }

  /** The fragments' tensor indices. */
  get fragments(): readonly (readonly number[])[] {
    return this.list.map((f) => f.tensors);
  }

  /** The fragment on the wire, or null. */
  get inFlight(): number | null {
    return this.flight?.fragment.index ?? null;
  }

  /** Fragment syncs applied (each one fragment's outer step). */
  get outerSteps(): number {
    return this.list.reduce((sum, f) => sum + f.outer.step, this.stepsBefore);
  }

  /**
   * After inner step `step` (from 1): apply the fragment issued `overlap` steps ago, issue the
   * fragment due now (applied at once without an overlap; this rank's pseudo-gradient times
   * `weight`), and with one left on the wire yield a turn of the event loop so its messages move.
   */
  async afterInnerStep(step: number, weight = 1): Promise<StreamStepResult> {
    let applied: number | null = null;
    let landed: Landed = { bytesSent: 0, syncMs: 0, waitMs: 0 };
    const { innerSteps, fragments, overlap } = this.options;
    if (this.flight !== null && step >= this.flight.issuedAt + overlap) {
      applied = this.flight.fragment.index;
      landed = await this.landFlight(true);
    }
    const due = fragmentDue(step, innerSteps, fragments);
    if (due !== null) {
      this.flight = await this.issue(this.list[due]!, step, weight);
      if (overlap === 0) {
        applied = due;
        landed = await this.landFlight(true);
      }
    }
    if (this.flight !== null) await yieldTurn();
    return { applied, ...landed };
  }

  /**
   * Every fragment now, so every rank ends with the global copy ([Note: streamed fragments]); the
   * end of training and an elastic world's sync points. The one in flight lands first with the
   * mixing; then every fragment's average is issued at once (each on its fragment's group) and
   * landed without it. `weight` as `DiLoCo.outerSync`'s. With `untrainedSince` (the inner step
   * just counted, the caller having trained nothing after it): a fragment whose sync was issued
   * after that step is not issued again, since its average on the wire already holds all of its
   * pseudo-gradient; it lands beside the others without the mixing (or, landed already, takes its
   * global copy). A failure leaves the fragments not landed as if never issued (their residuals
   * as before).
   */
  async syncAll(step: number, weight: number, untrainedSince: number | null): Promise<number> {
    let bytesSent = 0;
    const flights: InFlight[] = [];
    const fresh = (issuedAt: number) => untrainedSince !== null && issuedAt === untrainedSince;
    if (this.flight !== null && fresh(this.flight.issuedAt)) {
      flights.push(this.flight);
      this.flight = null;
    } else if (this.flight !== null) {
      bytesSent += (await this.landFlight(true)).bytesSent;
    }
    for (const fragment of this.list) {
      if (fragment === flights[0]?.fragment) continue;
      if (fresh(fragment.issuedAt)) {
        // Landed at this step (no overlap): its average is in the global copy.
        writeFlat(this.params, fragment.global, fragment.tensors);
        continue;
      }
      flights.push(await this.issue(fragment, step, weight));
    }
    let landed = 0;
    try {
      for (; landed < flights.length; landed++) {
        bytesSent += (await this.land(flights[landed]!, false)).bytesSent;
      }
    } catch (error) {
      // A fresh averager on the same group, so an average still running cannot touch it later.
      for (const { fragment, residualBefore } of flights.slice(landed)) {
        fragment.averager = fragment.averager.regroup(fragment.averager.group);
        fragment.averager.loadResiduals({ input: residualBefore, shard: null });
        fragment.issuedAt = -1;
      }
      throw error;
    }
    return bytesSent;
  }

  /**
   * Move to `group`: each fragment's averager regroups, and the fragment in flight is dropped
   * without waiting for it, its residual as before its issue ([Note: streamed fragments]).
   */
  regroup(group: ProcessGroup): void {
    const dropped = this.flight;
    this.flight = null;
    for (const fragment of this.list) {
      fragment.averager = fragment.averager.regroup(ownGroup(group));
      // The world's state is rank 0's after a change: no member skips a fragment's next issue.
      fragment.issuedAt = -1;
      if (fragment === dropped?.fragment) {
        fragment.averager.loadResiduals({ input: dropped.residualBefore, shard: null });
      }
    }
    this.options = { ...this.options, group };
  }

  /** The global copy, flat in parameter order. */
  flatGlobal(): Float32Array {
    return this.layout.gather(this.list.map((f) => [f.tensors, f.global]));
  }

  /** The outer momentum buffers, flat (zeros for a fragment without one yet), or null if none. */
  flatMomentum(): Float32Array | null {
    if (this.list.every((f) => f.outer.stateDict().momentumBuffer === null)) return null;
    return this.layout.gather(
      this.list.map((f) => [f.tensors, f.outer.stateDict().momentumBuffer]),
    );
  }

  /** The residuals of error feedback, flat; a fragment in flight's as before its issue. */
  flatResidual(): Float32Array | null {
    const residualOf = (f: Fragment) =>
      f === this.flight?.fragment ? this.flight.residualBefore : f.averager.residuals().input;
    if (this.list.every((f) => residualOf(f) === null)) return null;
    return this.layout.gather(this.list.map((f) => [f.tensors, residualOf(f)]));
  }

  /**
   * Load a flat state (lengths checked by the caller); nothing may be in flight. Sets the
   * fragments' global copies, momentum and residuals, not the parameters.
   */
  load(
    global: Float32Array,
    state?: { outerStep: number; momentum: Float32Array | null; residual: Float32Array | null },
  ): void {
    this.flight = null;
    for (const fragment of this.list) {
      fragment.global.set(this.layout.pick(global, fragment.tensors));
      fragment.issuedAt = -1;
      if (state === undefined) continue;
      fragment.outer.loadStateDict({
        step: 0,
        momentumBuffer:
          state.momentum === null ? null : this.layout.pick(state.momentum, fragment.tensors),
      });
      fragment.averager.loadResiduals({
        input: state.residual === null ? null : this.layout.pick(state.residual, fragment.tensors),
        shard: null,
      });
    }
    if (state !== undefined) this.stepsBefore = state.outerStep;
  }

  /** Issue `fragment`'s average: its pseudo-gradient times `weight`, averaged in the background. */
  private async issue(fragment: Fragment, step: number, weight: number): Promise<InFlight> {
    const delta = await readFlat(this.params, fragment.tensors);
    const carry = this.options.merge === 'carry' && this.options.overlap > 0;
    const atIssue = carry ? delta.slice() : null;
    const { global } = fragment;
    for (let i = 0; i < delta.length; i++) delta[i] = (global[i]! - delta[i]!) * weight;
    const residualBefore = fragment.averager.residuals().input;
    fragment.issuedAt = step;
    const issuedMs = performance.now();
    const result = fragment.averager.average(delta);
    const flight: InFlight = {
      fragment,
      issuedAt: step,
      delta,
      atIssue,
      result,
      residualBefore,
      issuedMs,
      doneMs: -1,
    };
    // Awaited in `land`; a fragment dropped at `regroup` may still fail on its old group.
    result.then(
      () => {
        flight.doneMs = performance.now();
      },
      () => {},
    );
    return flight;
  }

  /** Land the fragment in flight (`land`); it is off the wire whether that succeeds or throws. */
  private async landFlight(merge: boolean): Promise<Landed> {
    const flight = this.flight!;
    try {
      return await this.land(flight, merge);
    } finally {
      this.flight = null;
    }
  }

  /**
   * Await `flight`'s average and step its global copy; the local parameters then take it by the
   * configured merge (`merge`) or, without, become it ([Note: merging a landed fragment]).
   */
  private async land(flight: InFlight, merge: boolean): Promise<Landed> {
    const { fragment, delta, result } = flight;
    const landing = performance.now();
    const doneBefore = flight.doneMs >= 0;
    const stats: AverageStats = await result;
    const waitMs = doneBefore ? 0 : performance.now() - landing;
    const syncMs = (doneBefore ? flight.doneMs : performance.now()) - flight.issuedMs;
    fragment.outer.apply(fragment.global, delta);
    const { mixing } = this.options;
    const how = merge && flight.atIssue !== null ? 'carry' : 'mix';
    if (how === 'mix' && (!merge || mixing === 0)) {
      writeFlat(this.params, fragment.global, fragment.tensors);
    } else {
      const local = await readFlat(this.params, fragment.tensors);
      mergeLanded(local, fragment.global, how, mixing, flight.atIssue);
      writeFlat(this.params, local, fragment.tensors);
    }
    return { bytesSent: stats.bytesSent, syncMs, waitMs };
  }
}
