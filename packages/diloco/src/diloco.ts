import type { ProcessGroup } from '@webshard/collectives';
import type { StepOptions, Tensor } from '@webshard/tensor-core';
import { type DilocoOptions, type ResolvedDilocoOptions, resolveDilocoOptions } from './api.js';
import { CompressedAverager } from './compressed-average.js';
import { checkCreate, checkWeight } from './create-checks.js';
import { checkStateDict } from './state-dict-checks.js';
import { DilocoStateError } from './errors.js';
import { readFlat, writeFlat } from './flat-params.js';
import { OuterOptimizer } from './outer-optimizer.js';
import { StoredOuterState } from './stored-outer-state.js';
import type {
  DilocoState,
  DilocoStateDict,
  DilocoStepResult,
  InnerOptimizer,
  OuterSyncStats,
} from './diloco-types.js';
import { StreamedFragments } from './streamed-fragments.js';

/*
 * [Note: DiLoCo in an elastic world]
 * Members of an elastic world come and go at outer syncs, where DiLoCo's ranks meet anyway
 * (torchft and OpenDiLoCo's way). A sync that fails because a member was lost changes nothing on
 * the survivors (their parameters, global copy, momentum and residuals stay; `outerSync`), so they
 * `regroup` onto the world that is left and run it again there: the average is then the
 * survivors', what the lost member trained since the last sync is gone with it. A newcomer takes
 * the global copy, the outer momentum and the step counts from a live member (`loadStateDict`,
 * after `create` with `broadcast: false`) and its parameters are the global copy: it has no
 * pseudo-gradient, so in a sync it runs with the others before it trained it gives `weight` 0 and
 * the others size / contributors, which leaves the average the contributors' (with `topk` the
 * others give 1: a position is averaged over the ranks that sent it, and the newcomer sends
 * nothing, [Note: averaging sparse contributions]). Each rank's
 * compression residual is its own and stays with it; the shard residuals, tied to how the shards
 * split over the old group, are dropped at `regroup`.
 */

/**
 * [Note: DiLoCo's outer sync]
 * Every rank keeps the global parameters of the last sync as a flat f32 host copy. `step()` runs
 * the inner optimizer on the model's own parameters; every `innerSteps` steps it awaits
 * `outerSync()`: the pseudo-gradient global - local is averaged over the group (compressed as
 * configured), the outer optimizer (Nesterov SGD) steps the global copy with it, and the model's
 * parameters are set to the new global copy. Every rank computes the same global bits from the same
 * average, so no broadcast is needed after the first (`create` broadcasts rank 0's parameters).
 * The inner optimizer's state (AdamW's moments) carries across syncs, as in the paper. With H = 1,
 * outer SGD at lr 1 and a linear inner optimizer (SGD), this is data parallel training: the new
 * global is the average of the ranks' updated parameters.
 */
export class DiLoCo {
  private resolved: ResolvedDilocoOptions;
  readonly outer: OuterOptimizer;
  private averager: CompressedAverager;
  private readonly global: Float32Array;
  /** Streaming DiLoCo's fragments when `fragments`, `overlap` or `mixing` was given, else null. */
  private readonly streamed: StreamedFragments | null;
  /** The global copy and momentum in `outerState`'s store, else null ([Note: the outer state in a store]). */
  private stored: StoredOuterState | null = null;
  private innerSteps = 0;
  private current: DilocoState = 'idle';
  private sent = 0;

  private constructor(
    readonly params: readonly Tensor[],
    readonly inner: InnerOptimizer,
    options: ResolvedDilocoOptions,
    global: Float32Array,
  ) {
    this.resolved = options;
    this.global = global;
    this.outer = new OuterOptimizer(
      { lr: options.outerLr, momentum: options.outerMomentum, nesterov: options.nesterov },
      options.group.rank,
    );
    const codec = {
      compression: options.compression,
      blockSize: options.blockSize,
      ...(options.compression === 'topk'
        ? {
            density: options.density,
            levels: options.levels,
            shapes: options.shapes ?? params.map((p) => p.shape),
          }
        : {}),
      errorFeedback: options.errorFeedback,
      errorDecay: options.errorDecay,
      timeoutMs: options.timeoutMs,
    };
    this.averager = new CompressedAverager(options.group, codec);
    this.streamed = options.streamed
      ? new StreamedFragments(params, global, {
          group: options.group,
          innerSteps: options.innerSteps,
          fragments: options.fragments,
          overlap: options.overlap,
          merge: options.merge,
          mixing: options.mixing,
          outer: {
            lr: options.outerLr,
            momentum: options.outerMomentum,
            nesterov: options.nesterov,
          },
          codec,
        })
      : null;
  }

  /**
   * Wrap `params` (the model's parameters, f32, in the same order on every rank) and their inner
   * optimizer. Checks the options first, then broadcasts rank 0's parameters so every rank starts
   * from the same global copy. Every rank of the group calls it.
   */
  static async create(
    params: Iterable<Tensor>,
    inner: InnerOptimizer,
    options: DilocoOptions,
  ): Promise<DiLoCo> {
    const resolved = resolveDilocoOptions(options);
    const list = [...params];
    checkCreate(list, inner, resolved);
    const global = await readFlat(list);
    if (resolved.broadcast) {
      await resolved.group.broadcast(global, 0, { timeoutMs: resolved.timeoutMs }).wait();
      // The ranks leave together: a broadcast frees each rank when its copy is in, down the ring
      // a hop apart (on broadband-20 the trainer's GPT reached its fourth rank 0.6 s after the
      // second), and the first outer sync would wait that out inside the training.
      await resolved.group.barrier({ timeoutMs: resolved.timeoutMs }).wait();
      writeFlat(list, global);
    }
    if (resolved.outerState === null) return new DiLoCo(list, inner, resolved, global);
    // Nothing of the global copy stays in memory: [Note: the outer state in a store].
    const diloco = new DiLoCo(list, inner, resolved, new Float32Array(0));
    diloco.stored = await StoredOuterState.create(resolved.outerState, list, diloco.outer, global);
    return diloco;
  }

  /** Where the global copy and the outer momentum live, in words: `memory` or the store's. */
  get outerStateWhere(): string {
    return this.stored?.where ?? 'memory';
  }

  /** The options, checked, with their defaults; `group` is the current one (`regroup`). */
  get options(): ResolvedDilocoOptions {
    return this.resolved;
  }

  /** The group the pseudo-gradients are averaged over. */
  get group(): ProcessGroup {
    return this.resolved.group;
  }

  /**
   * Move to `group` (the members left after a change of membership, or with newcomers):
   * collectives of later syncs run there. What this rank's compression is owed carries over.
   * Allowed when idle and after a failed sync, which it ends: the sync may then run again in the
   * new group ([Note: DiLoCo in an elastic world]). Every member of `group` calls it.
   */
  regroup(group: ProcessGroup): void {
    if (this.current === 'syncing') this.assertIdle('regroup');
    this.averager = this.averager.regroup(group);
    this.streamed?.regroup(group);
    this.resolved = { ...this.resolved, group };
    this.current = 'idle';
  }

  get state(): DilocoState {
    return this.current;
  }

  /** Inner steps taken. */
  get innerStep(): number {
    return this.innerSteps;
  }

  /** Outer steps taken (streamed: fragment syncs applied, each one fragment's outer step). */
  get outerStep(): number {
    return this.streamed?.outerSteps ?? this.outer.step;
  }

  /** Streamed: the fragment whose average is on the wire, or null ([Note: streamed fragments]). */
  get fragmentInFlight(): number | null {
    return this.streamed?.inFlight ?? null;
  }

  /** Streamed: the parameter indices of each fragment; null when the syncs are not streamed. */
  get fragments(): readonly (readonly number[])[] | null {
    return this.streamed?.fragments ?? null;
  }

  /** Bytes this rank sent in all outer syncs so far. */
  get bytesSent(): number {
    return this.sent;
  }

  /**
   * The global parameters of the last sync, chunk by chunk (views to read, not to keep): from a
   * store a chunk at a time, so a digest of them holds no whole copy.
   */
  async *globalChunks(): AsyncGenerator<Float32Array> {
    if (this.stored !== null) yield* this.stored.chunks('global');
    else yield this.streamed?.flatGlobal() ?? this.global;
  }

  /** The global parameters of the last sync (a copy); with a store, `readStateDict` instead. */
  globalParameters(): Float32Array {
    if (this.stored !== null) this.refuseStored('globalParameters');
    return this.streamed?.flatGlobal() ?? this.global.slice();
  }

  /**
   * One inner step (the inner optimizer's `step`, after backward), then, every `innerSteps` steps,
   * the outer sync, awaited. Every rank takes the same number of steps. `last`: the end of
   * training, as `afterInnerStep`'s.
   */
  async step(options: StepOptions & { last?: boolean } = {}): Promise<DilocoStepResult> {
    this.assertIdle('step');
    const { last, ...inner } = options;
    this.inner.step(inner);
    return this.afterInnerStep(last === undefined ? {} : { last });
  }

  /**
   * Count an inner step the caller took itself (a training loop that steps the optimizer through a
   * loss scaler or a clip), then, every `innerSteps` steps, await the outer sync: `step()` without
   * the optimizer's `step`. `weight` scales this rank's pseudo-gradient in a sync issued now, as
   * `outerSync`'s (streamed: the fragment issued after this step; an elastic world's first issue
   * after a newcomer joined, [Note: DiLoCo in an elastic world]). `last`: the end of training, so
   * the step ends with every parameter synced (the global copy on every rank), as `outerSync()`
   * after it would, but knowing nothing trains after it: a sync that this step already ran or
   * issued is not run again (streamed: the fragment issued now lands with the others instead of
   * landing and going out a second time, [Note: streamed fragments]).
   */
  async afterInnerStep(
    options: { weight?: number; last?: boolean } = {},
  ): Promise<DilocoStepResult> {
    this.assertIdle('afterInnerStep');
    const weight = checkWeight('afterInnerStep', this.group.rank, options.weight);
    const last = options.last === true;
    this.innerSteps++;
    if (this.streamed !== null) {
      // A fragment lands and another is issued ([Note: streamed fragments]).
      this.current = 'syncing';
      try {
        const landed = await this.streamed.afterInnerStep(this.innerSteps, weight);
        this.sent += landed.bytesSent;
        let { syncMs, waitMs } = landed;
        if (last) {
          const start = performance.now();
          this.sent += await this.streamed.syncAll(this.innerSteps, weight, this.innerSteps);
          const ms = performance.now() - start;
          syncMs += ms;
          waitMs += ms;
        }
        this.current = 'idle';
        return {
          innerStep: this.innerSteps,
          synced: last || landed.applied !== null,
          syncMs,
          waitMs,
        };
      } catch (error) {
        this.current = 'failed';
        throw error;
      }
    }
    const synced = last || this.innerSteps % this.options.innerSteps === 0;
    const start = performance.now();
    if (synced) await this.outerSync({ weight });
    const ms = synced ? performance.now() - start : 0;
    return { innerStep: this.innerSteps, synced, syncMs: ms, waitMs: ms };
  }

  /**
   * The outer step now (`step` calls it every `innerSteps` steps; call it directly to sync at
   * another point, on every rank at once): average global - local over the group, step the
   * global copy with the outer optimizer, and set the parameters to it. `weight` scales this
   * rank's pseudo-gradient in the average (default 1): a member with none (admitted since the last
   * global copy) gives 0 and the others size / contributors (with `topk`: 1), so that the average
   * is the contributors' ([Note: DiLoCo in an elastic world]). A failure (a rank lost) changes
   * nothing: the parameters, the global copy, the momentum and the compression's residuals stay as
   * they were, and the wrapper is `failed` until `regroup` (then the sync may run again) or a load.
   * `missed`: a newcomer still downloading its state (weight 0) keeps the average there instead of
   * applying it ([Note: catching up a join]).
   */
  async outerSync(
    options: { weight?: number; missed?: Float32Array[] } = {},
  ): Promise<OuterSyncStats> {
    this.assertIdle('outerSync');
    const weight = checkWeight('outerSync', this.group.rank, options.weight);
    if (this.streamed !== null && options.missed !== undefined) this.refuseStreamed('outerSync');
    this.current = 'syncing';
    try {
      if (this.streamed !== null) {
        // Every fragment, the one in flight first: [Note: streamed fragments].
        const bytesSent = await this.streamed.syncAll(this.innerSteps, weight, null);
        this.sent += bytesSent;
        this.current = 'idle';
        return { outerStep: this.outerStep, bytesSent };
      }
      let delta: Float32Array;
      if (this.stored !== null) delta = await this.stored.pseudoGradient(weight);
      else {
        delta = await readFlat(this.params);
        for (let i = 0; i < delta.length; i++) delta[i] = (this.global[i]! - delta[i]!) * weight;
      }
      const { bytesSent } = await this.averager.average(delta);
      // A newcomer still downloading keeps the average to replay it: [Note: catching up a join].
      if (options.missed !== undefined) options.missed.push(delta);
      else await this.applyAverage(delta);
      this.sent += bytesSent;
      this.current = 'idle';
      return { outerStep: this.outer.step, bytesSent };
    } catch (error) {
      this.current = 'failed';
      throw error;
    }
  }

  /**
   * One outer step with an average an `outerSync({ missed })` kept: the global copy and the
   * parameters move as they would have in that sync ([Note: catching up a join]). In memory it
   * is applied when this returns; with a store, when the promise resolves.
   */
  applyAverage(averaged: Float32Array): Promise<void> {
    if (this.streamed !== null) this.refuseStreamed('applyAverage');
    if (this.stored !== null) return this.stored.apply(averaged);
    this.outer.apply(this.global, averaged);
    writeFlat(this.params, this.global);
    return Promise.resolve();
  }

  /**
   * Rounds the outer momentum in place with `round` ([Note: a compressed join]); in memory it is
   * done when this returns, with a store when the promise resolves.
   */
  roundMomentum(round: (momentum: Float32Array) => void): Promise<void> {
    if (this.streamed !== null) this.refuseStreamed('roundMomentum');
    if (this.stored !== null) return this.stored.roundMomentum(round);
    const state = this.outer.stateDict();
    if (state.momentumBuffer !== null) {
      round(state.momentumBuffer);
      this.outer.loadStateDict(state);
    }
    return Promise.resolve();
  }

  private refuseStreamed(op: string): never {
    throw new DilocoStateError(
      { op, rank: this.group.rank },
      this.current,
      'not with streamed syncs',
    );
  }

  private refuseStored(op: string): never {
    throw new DilocoStateError(
      { op, rank: this.group.rank },
      this.current,
      `the global copy is in a store (${this.outerStateWhere}): await readStateDict() instead`,
    );
  }

  /** `stateDict`, read from the store when there is one ([Note: the outer state in a store]). */
  async readStateDict(): Promise<DilocoStateDict> {
    if (this.stored === null) return this.stateDict();
    const { global, momentumBuffer } = await this.stored.read();
    const residuals = this.averager.residuals();
    return {
      innerStep: this.innerSteps,
      outerStep: this.outer.step,
      global,
      momentumBuffer,
      residual: residuals.input,
      shardResidual: residuals.shard,
    };
  }

  /** The state to checkpoint (copies); with a store, `readStateDict` instead. */
  stateDict(): DilocoStateDict {
    if (this.stored !== null) this.refuseStored('stateDict');
    if (this.streamed !== null) {
      // A fragment in flight is saved as if dropped ([Note: streamed fragments]).
      return {
        innerStep: this.innerSteps,
        outerStep: this.streamed.outerSteps,
        global: this.streamed.flatGlobal(),
        momentumBuffer: this.streamed.flatMomentum(),
        residual: this.streamed.flatResidual(),
        shardResidual: null,
      };
    }
    const outer = this.outer.stateDict();
    const residuals = this.averager.residuals();
    return {
      innerStep: this.innerSteps,
      outerStep: outer.step,
      global: this.global.slice(),
      momentumBuffer: outer.momentumBuffer,
      residual: residuals.input,
      shardResidual: residuals.shard,
    };
  }

  /**
   * Load a state from `stateDict` (of a run with the same parameters), checked before anything
   * changes; sets the parameters to its global copy. Call it with the inner optimizer's own load.
   * In memory it is loaded when this returns; with a store, when the promise resolves.
   */
  loadStateDict(state: DilocoStateDict): Promise<void> {
    if (this.current === 'syncing') this.assertIdle('loadStateDict');
    const n = this.params.reduce((sum, p) => sum + p.size, 0);
    checkStateDict(state, n, this.group.rank);
    this.innerSteps = state.innerStep;
    this.outer.loadStateDict({ step: state.outerStep, momentumBuffer: state.momentumBuffer });
    this.averager.loadResiduals({ input: state.residual, shard: state.shardResidual });
    if (this.stored !== null) {
      this.current = 'idle';
      writeFlat(this.params, state.global);
      return this.stored.load(state.global, state.momentumBuffer);
    }
    this.global.set(state.global);
    this.streamed?.load(state.global, {
      outerStep: state.outerStep,
      momentum: state.momentumBuffer,
      residual: state.residual,
    });
    writeFlat(this.params, this.global);
    this.current = 'idle';
    return Promise.resolve();
  }

  private assertIdle(op: string): void {
    if (this.current !== 'idle') {
      throw new DilocoStateError(
        { op, rank: this.group.rank },
        this.current,
        this.current === 'syncing'
          ? 'an outer sync is running: await it first'
          : 'an earlier outer sync failed: regroup() onto the members left, or resume from a checkpoint',
      );
    }
  }
}
