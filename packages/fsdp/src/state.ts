import type { ProcessGroup } from '@webshard/collectives';
import type { RunningBackward, Tensor } from '@webshard/tensor-core';
import { ReduceScatterBucketer } from './bucketer.js';
import { forEachTensor } from './module-tree.js';
import type { FsdpParamGroup, TrainingState } from './param-group.js';
import type { SsdShards } from './ssd/ssd-shards.js';

/**
 * What the shared state reads and sets of a unit (`U` is one): it names no
 * unit class, so the unit imports the state and not the other way round.
 */
export interface SharedUnit {
  readonly paramGroup: FsdpParamGroup;
  readonly requireGradSync: boolean;
  readonly ssdShards: SsdShards | null;
  trainingState: TrainingState;
  assertState(op: string, states: readonly TrainingState[]): void;
}

/** What the root adds: the settings of its reduce-scatter buckets. */
export interface SharedRoot extends SharedUnit {
  readonly options: {
    readonly processGroupReduceScatter: ProcessGroup;
    readonly bucketCapMb: number;
  };
}

/**
 * What the root shares with every unit under it, made by the root's lazy init on its first forward
 * (fairscale's `_lazy_init` / PyTorch FSDP2's `FSDPState`): the units, the order their forwards ran
 * in on the first iteration (the prefetch order), whether gradients are synchronized (`noSync`), the
 * end-of-backward callback queued once per backward, and the reductions it waits for.
 */
export class FsdpSharedState<U extends SharedUnit = SharedUnit> {
  /** Every unit under the root, the root first, in module pre-order. */
  readonly units: U[];
  /** Units in the order their forward started, recorded on the first iteration. */
  readonly forwardOrder: U[] = [];
  /**
   * Units in the order their pre-backward hook ran, recorded in the first backward: the backward
   * prefetch order from then on. A unit nested in another runs its backward after the outer one's,
   * though its forward started later, so the reversed forward order is only the first guess.
   */
  readonly backwardOrder: U[] = [];
  private recording = true;
  /** Whether this backward's end-of-backward callback is queued. */
  finalCallbackQueued = false;
  /** Reductions issued during this backward, awaited by the end-of-backward callback. */
  private readonly pending: Promise<void>[] = [];
  /** Reductions issued in this backward and not settled. */
  private reducing = 0;
  /** The units whose pre-backward hook ran in this backward. */
  readonly preBackwardRan = new Set<U>();
  /** Output tensors some unit hooked ([Note: outputs of nested units]). */
  private readonly hookedOutputs = new WeakSet<Tensor>();
  /** The forward calls whose outputs ran their unit's pre-backward in this backward. */
  private readonly preBackwardCalls = new Set<object>();

  /** Batches small reduce-scatters ([Note: reduce-scatter buckets]). */
  readonly bucketer: ReduceScatterBucketer;

  constructor(
    readonly root: U & SharedRoot,
    units: U[],
  ) {
    this.units = units;
    this.bucketer = new ReduceScatterBucketer(
      root.options.processGroupReduceScatter,
      Math.floor(root.options.bucketCapMb * 2 ** 20),
    );
  }

  /** Note that `unit`'s forward started (first iteration only). */
  recordForward(unit: U): void {
    if (this.recording && !this.forwardOrder.includes(unit)) this.forwardOrder.push(unit);
  }

  /** Note that `unit`'s pre-backward hook ran (first backward only). */
  recordBackward(unit: U): void {
    if (this.recording && !this.backwardOrder.includes(unit)) this.backwardOrder.push(unit);
  }

  /** The first backward ended: the forward and backward orders are fixed from now on. */
  stopRecording(): void {
    this.recording = false;
  }

  /** The (at most) `count` units after `unit` in the recorded forward order, nearest first. */
  aheadInForward(unit: U, count: number): U[] {
    const i = this.forwardOrder.indexOf(unit);
    return i < 0 ? [] : this.forwardOrder.slice(i + 1, i + 1 + count);
  }

  /**
   * The units whose backward follows `unit`'s, nearest first: after the first backward, those
   * after it in the recorded backward order; before, those before it in forward order.
   */
  nextInBackward(unit: U): U[] {
    if (!this.recording) {
      const i = this.backwardOrder.indexOf(unit);
      return i < 0 ? [] : this.backwardOrder.slice(i + 1);
    }
    const i = this.forwardOrder.indexOf(unit);
    return i <= 0 ? [] : this.forwardOrder.slice(0, i).reverse();
  }

  /**
   * [Note: outputs of nested units]
   * A unit hooks every output of its forward that requires grad, and each hook runs the unit's
   * pre-backward: it gathers again what the unit reduced in between, which a checkpoint's
   * recomputation needs ([Note: recomputation]). An output a nested unit produced and the outer
   * unit returns as well (`return [l3(inner), inner]`, with `inner` from a nested unit) is
   * different: its gradient comes late, through the outer unit's own nodes (l3's), which by then
   * may have completed and reduced their parameters, so its hook gathered them again for nothing
   * (two all-gathers a step in fairscale's test_pre_backward_hook model) and held them to the end
   * of backward. fairscale registers no outer hook on such a tensor unless it is the first output;
   * here the outer unit's hook on it runs the pre-backward only when no hook of the same forward
   * call ran it yet in this backward: it still starts the unit's backward when the loss comes from
   * that output alone, and the unit's own outputs keep hooks that gather every time.
   */
  /**
   * Hook `preBackward` on every tensor of `output` (one forward call of a unit) that requires grad;
   * the number hooked. It gets the call and whether a unit hooked the tensor first.
   */
  hookOutputs(
    output: unknown,
    preBackward: (call: object, nested: boolean, running: RunningBackward) => Promise<undefined>,
  ): number {
    const call = {};
    let hooked = 0;
    forEachTensor(output, (t) => {
      if (!t.requiresGrad) return;
      const nested = this.hookedOutputs.has(t);
      this.hookedOutputs.add(t);
      t.registerHook((_grad, running) => preBackward(call, nested, running));
      hooked++;
    });
    return hooked;
  }

  /**
   * Whether a pre-backward hook of forward `call` runs: always on the unit's own outputs, on a
   * nested unit's only when none of the call's hooks ran yet in this backward.
   */
  runsPreBackward(call: object, nested: boolean): boolean {
    if (nested && this.preBackwardCalls.has(call)) return false;
    this.preBackwardCalls.add(call);
    return true;
  }

  /**
   * Issue the gathers of `ahead` (the units that run next, nearest first) before they are needed,
   * within `limitAllGathers` full units at once (the asking unit's own counts, unless it is the
   * root, which keeps its own): with a limit of L, up to L units ahead. A unit with shards in a
   * store is prefetched only as the nearest: its shards are read in first, and the unit after it
   * has its shards read ahead with `readAhead` ([Note: prefetching shards from a store]).
   *
   * [Note: prefetching several units ahead]
   * A gather completes when every rank has issued it, and a rank issues unit i + 1's gather as
   * unit i starts (fairscale's and PyTorch FSDP1's one unit of prefetch). So a rank more than one
   * unit's compute ahead of the slowest waits at every unit, where DDP's ranks meet once a step:
   * the ranks' drift (one rank's block took 5.2 ms where the other's took 2.7, issue 48's
   * timeline) is paid per unit. With a limit of L, unit i issues the gathers of units i + 1 ..
   * i + L not gathered yet, and a rank may run up to L units ahead before it waits (FSDP2's
   * `set_modules_to_forward_prefetch` and `set_modules_to_backward_prefetch` with several
   * modules; DeepSpeed ZeRO-3's prefetch bucket). The cost is up to L - 1 more units' full
   * parameters at once (memory.test: the peak of its 8-block net at 2 ranks grew by 1.13 blocks
   * with a limit of 3). The limit is the asking unit's own, so a model whose units are wrapped
   * separately passes it to each. Before 2026-11-28 a unit prefetched only the next one, and a
   * limit above 1 mattered only while an earlier prefetch was still in flight. Measured on the
   * bench's GPT 4x96 (`--prefetch-ahead 3`, 2 cores, three launches at 2 ranks): over tcp the
   * gather wait was 3-5 ms against 6-9 with one unit ahead, over shm 5-10 against 10-11; the
   * step 0.93-1.06 of one unit ahead's, within the launches' spread. At GPT-2 size (one launch,
   * 2 ranks over shm) the gather wait 38 ms against 82, the step 18.1 s against 19.3. At 4 ranks
   * (two to a core) nothing changed, the ranks' turns on the cores being the wait.
   */
  async prefetch(ahead: readonly U[], fromRoot: boolean, limitAllGathers: number): Promise<void> {
    let busy = this.gatheredCount() - (fromRoot ? 0 : 1);
    for (const [k, unit] of ahead.entries()) {
      if (busy >= limitAllGathers) return;
      // Gathered, gathering, or with nothing to gather: it counts in `busy` already, if at all.
      if (!unit.paramGroup.isSharded) continue;
      if (unit.ssdShards !== null) {
        if (k > 0) return;
        await unit.ssdShards.gatherAhead(unit.paramGroup);
        const following = ahead[1];
        if (following?.paramGroup.isSharded) following.ssdShards?.readAhead();
        return;
      }
      unit.paramGroup.unshard();
      busy++;
    }
  }

  /** A reduction issued in this backward, awaited at its end (its failure surfaces there). */
  addReduction(done: Promise<void>): void {
    this.reducing++;
    const settled = () => {
      this.reducing--;
    };
    done.then(settled, settled);
    this.pending.push(done);
  }

  /**
   * Whether a reduction or a gather is in flight: a post-accumulate hook then gives it a turn of
   * the thread ([Note: progress turns] in the collectives).
   */
  inFlight(): boolean {
    return this.reducing > 0 || this.units.some((u) => u.paramGroup.isGathering);
  }

  /** Non-root units whose full parameters are gathered or being gathered. */
  gatheredCount(): number {
    let n = 0;
    for (const u of this.units) if (u !== this.root && u.paramGroup.isUnshardedOrGathering) n++;
    return n;
  }

  /**
   * The end-of-backward callback, queued once per backward by the first pre-backward hook; see
   * [Note: FSDP and autograd], step 4: reduce what was only partly produced, await every
   * reduction, reshard, and put every unit back to IDLE.
   */
  async finalizeBackward(): Promise<void> {
    try {
      for (const unit of this.units) await unit.paramGroup.waitForUnshard();
      // No read or prefetch of a shard may be in flight when the step comes.
      for (const unit of this.units) await unit.ssdShards?.settle();
      // Gradients in a store are read back where this backward adds to them ([Note: gradients in
      // a store]).
      for (const unit of this.units) {
        if (unit.requireGradSync) await unit.ssdShards?.loadGradients();
      }
      for (const unit of this.units) {
        if (!unit.requireGradSync) continue;
        for (const flat of unit.paramGroup.flatParams) {
          if (flat.fullGrad === null) continue;
          this.addReduction(unit.paramGroup.reduceGrads(flat, this.bucketer));
        }
      }
      this.bucketer.flush();
      await Promise.all(this.pending);
      for (const unit of this.units) await unit.ssdShards?.offloadGradients();
    } finally {
      this.pending.length = 0;
      this.finalCallbackQueued = false;
      this.preBackwardRan.clear();
      this.preBackwardCalls.clear();
      this.stopRecording();
      for (const unit of this.units) {
        unit.paramGroup.resetGradCounts();
        if (unit.requireGradSync) unit.paramGroup.reshard();
        if (unit.trainingState === 'BACKWARD_PRE' || unit.trainingState === 'BACKWARD_POST') {
          unit.trainingState = 'IDLE';
        }
      }
    }
    for (const unit of this.units) unit.assertState('end of backward', ['IDLE']);
  }
}
