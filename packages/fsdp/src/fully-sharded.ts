import { isGradEnabled, Module, type Tensor } from '@webshard/tensor-core';
import { markManagedParameter } from '@webshard/tensor-core/autograd';
import { finitePositive, type FsdpOptions, type ResolvedOptions, resolveOptions } from './api.js';
import { BackwardHooks } from './backward-hooks.js';
import { castBuffers, castInputs, freeCasts } from './casts.js';
import { FsdpStateError, FsdpWrapError } from './errors.js';
import { extraRepr, moduleTree } from './repr.js';
import type { FlatParameter } from './flat-param.js';
import { cleanPath, namedShards, nestedUnits, WRAPPED_MODULE } from './module-tree.js';
import { type FsdpParamGroup, RECOMPUTE_STATES, type TrainingState } from './param-group.js';
import { type BorrowedParams, appendShared, recordOwner } from './shared-params.js';
import type { SsdShards } from './ssd/ssd-shards.js';
import { FsdpSharedState } from './state.js';
import { shardUnit } from './unit-shards.js';
import {
  applyWithFullParams,
  resetWithFullParams,
  type SummonOptions,
  summonFullParams,
} from './summon.js';

const wrappedBy = new WeakMap<Module, FullyShardedDataParallel>();

/**
 * FullyShardedDataParallel: a module whose parameters, gradients and optimizer state are sharded
 * over a process group (ZeRO-3), with fairscale's semantics. See [Note: FSDP and autograd].
 *
 * ```ts
 * const model = new FullyShardedDataParallel(net, { group });
 * const optimizer = new AdamW(model.parameters(), { lr: 1e-3 }); // the shards
 * const loss = await model.call(x, y);
 * await loss.backward();                                         // gradients reduce-scattered
 * optimizer.step();
 * ```
 *
 * [Note: FSDP and autograd]
 * A step of one unit, through tensor-core's hooks:
 * 1. forward: the root's lazy init shares one `FsdpSharedState` with every unit under it; the unit
 *    gathers its flat parameters (`unshard`, one all-gather each, in the compute dtype) and issues
 *    the next unit's gather (prefetch, up to `limitAllGathers`), runs the wrapped module, frees the
 *    full parameters (`reshardAfterForward`; not on the root with `disableReshardOnRoot`, never
 *    under `noGrad` where no backward will come) and registers a tensor hook on every output that
 *    requires grad.
 * 2. the first of those hooks to fire in a backward (once per backward, however many outputs or
 *    forwards feed it; a nested unit's output returned again: [Note: outputs of nested units]) is
 *    the pre-backward hook: state BACKWARD_PRE, gather again, prefetch the next unit whose
 *    backward has not run (in the order pre-backward hooks ran in the first backward; reversed
 *    forward order before), point the parameters' `.grad` at views of a flat gradient, and queue
 *    the root's end-of-backward callback once for the whole backward. The
 *    engine runs a tensor hook before the node that produced the output, so every node that reads
 *    the unit's parameters runs after the gather.
 * 3. post-accumulate hooks count the parameters whose gradient is complete; when a flat
 *    parameter's last one arrives, every node that reads those parameters has run (each has an edge
 *    to the parameter's accumulator), so the unit frees them and issues the reduce-scatter right
 *    away, overlapping the rest of backward. Frozen parameters are a flat parameter of their own and
 *    are freed at the end of backward instead.
 * 4. the end-of-backward callback (`FsdpSharedState.finalizeBackward`) issues, in unit order,
 *    the reduce-scatters of flat parameters whose gradients were only partly produced, awaits
 *    every reduction, frees what is still gathered and puts every unit back to IDLE. `shard.grad`
 *    then holds the averaged gradient.
 * Collectives on a group run in issue order, so every rank must issue them in the same order: the
 * order above depends only on the module structure and the graph, which are the same on every
 * rank. A parameter that gets a gradient on some ranks and not others makes the reduce-scatters go
 * in different orders, which the group's fingerprint check turns into `CollectiveMismatchError`.
 */
export class FullyShardedDataParallel<
  Args extends unknown[] = unknown[],
  Out = unknown,
> extends Module<Args, Promise<Awaited<Out>>> {
  readonly module: Module<Args, Out>;
  readonly options: ResolvedOptions;
  readonly paramGroup: FsdpParamGroup;
  /** With `ssdOffload`, the unit's shards in their store ([Note: shards in a store]); else null. */
  readonly ssdShards: SsdShards | null;
  /** Where this unit is in the step; see `TrainingState`. */
  trainingState: TrainingState = 'IDLE';
  /** False inside `noSync`: gradients accumulate in full and are not reduced. */
  requireGradSync = true;
  private shared: FsdpSharedState<FullyShardedDataParallel> | null = null;
  private path: string | null = null;
  /** The tensors the unit took from the module at wrap time (before any replacement). */
  private readonly sources = new Set<Tensor>();
  /** The units whose parameters this one's module also uses ([Note: parameters shared across units]). */
  private readonly borrowed: BorrowedParams;
  /** The pre-backward and post-accumulate hooks ([Note: FSDP and autograd], steps 2 and 3). */
  private readonly backwardHooks: BackwardHooks;

  constructor(module: Module<Args, Out>, options: FsdpOptions) {
    super();
    const op = 'FullyShardedDataParallel';
    if (module instanceof FullyShardedDataParallel) {
      throw new FsdpWrapError(op, `the module is already a FullyShardedDataParallel unit`);
    }
    const previous = wrappedBy.get(module);
    if (previous !== undefined) {
      throw new FsdpWrapError(
        op,
        `${module.typeName} is already wrapped by a FullyShardedDataParallel unit`,
      );
    }
    this.options = resolveOptions(options);
    this.module = module;
    const nested = nestedUnits(module, isUnit).map((unit) => ({
      sources: unit.sources,
      typeName: unit.module.typeName,
    }));
    const built = shardUnit(op, module, this.options, isUnit, nested, () => this.unitName);
    for (const tensor of built.sources) this.sources.add(tensor);
    recordOwner(this, built.flats, built.replacements);
    this.borrowed = built.borrowed;
    this.paramGroup = built.paramGroup;
    this.ssdShards = built.ssdShards;
    this.backwardHooks = new BackwardHooks(this, this.borrowed, () => this.shared!);
    const flats = built.flats;
    for (const flat of flats) {
      for (const e of flat.entries) {
        markManagedParameter(
          e.param,
          `is sharded by a FullyShardedDataParallel unit: build the optimizer over the unit's parameters() (its flat shards)`,
        );
      }
      this.backwardHooks.hookGrads(flat);
    }
    // The wrapper is invisible in names: keep the tensors' names as registerModule found them.
    const named = [...module.namedParameters(), ...module.namedBuffers()].map(
      ([, t]) => [t, t.name] as const,
    );
    this.registerModule(WRAPPED_MODULE, module);
    for (const [t, name] of named) t.name = name;
    wrappedBy.set(module, this);
    for (const [path, m] of this.namedModules()) {
      if (m instanceof FullyShardedDataParallel) m.path = cleanPath(path);
    }
  }

  /** The unit's module path in the unwrapped model (`<root>` for the outermost). */
  get unitName(): string {
    return this.path === null || this.path === ''
      ? this.path === ''
        ? '<root>'
        : this.module.typeName
      : this.path;
  }

  get rank(): number {
    return this.options.group.rank;
  }

  /** The unit's module path relative to its root, `''` for the root (known from construction). */
  get modulePath(): string {
    return this.path ?? '';
  }

  /** Whether this unit is the root of its tree (known after the first forward). */
  get isRoot(): boolean {
    return this.shared !== null && this.shared.root === this;
  }

  /** This unit's FP32 shards, one per flat parameter. */
  get flatParameters(): readonly FlatParameter[] {
    return this.paramGroup.flatParams;
  }

  /** Every unit in this subtree, this one first, in module pre-order. */
  units(): FullyShardedDataParallel[] {
    return this.modules().filter(
      (m): m is FullyShardedDataParallel => m instanceof FullyShardedDataParallel,
    );
  }

  /**
   * The shards of this unit and every nested unit, as `[name, shard]` (names like
   * `transformer.h.0.flat_param_0`; with `flattenParameters: false` each shard holds one
   * parameter and has its name, `transformer.h.0.attn.c_attn.weight`, as in fairscale), in the
   * unwrapped model's order ([Note: the order of named shards]): what the optimizer steps on.
   * Inside `summonFullParams` the module's own parameters under their original names instead.
   */
  override namedParameters(
    options: { recurse?: boolean; removeDuplicate?: boolean } = {},
  ): [string, Tensor][] {
    if (this.trainingState === 'SUMMON_FULL_PARAMS') {
      return this.module
        .namedParameters(options)
        .map(([name, t]) => [cleanPath(name), t] as [string, Tensor]);
    }
    return namedShards<FullyShardedDataParallel>(this, isUnit, options.recurse !== false);
  }

  /**
   * Inside `summonFullParams`, the wrapped module's state dict under its original names. Outside it
   * the parameters are sharded: a `FsdpStateError` (gather them with `summonFullParams`).
   */
  override stateDict(prefix = ''): Map<string, Tensor> {
    if (this.trainingState !== 'SUMMON_FULL_PARAMS') {
      throw new FsdpStateError(
        'stateDict',
        this.unitName,
        this.rank,
        this.trainingState,
        ['SUMMON_FULL_PARAMS'],
        'the parameters are sharded: call stateDict inside summonFullParams',
      );
    }
    const out = new Map<string, Tensor>();
    for (const [key, t] of this.module.stateDict()) out.set(prefix + cleanPath(key), t);
    return out;
  }

  /** Run `forward` under the unit's sharding; see [Note: FSDP and autograd]. */
  async forward(...args: Args): Promise<Awaited<Out>> {
    const shared = await this.lazyInit();
    // During a backward a forward is a checkpoint's recomputation ([Note: recomputation]).
    this.assertState('forward', shared.finalCallbackQueued ? RECOMPUTE_STATES : ['IDLE']);
    this.trainingState = 'FORWARD';
    const { inputs, casts } = this.isRoot
      ? castInputs(args, this.options)
      : { inputs: args, casts: [] as Tensor[] };
    let output: Awaited<Out> | undefined;
    try {
      shared.recordForward(this);
      for (const flat of this.paramGroup.flatParams) {
        flat.syncRequiresGrad();
        this.backwardHooks.hookGrads(flat);
      }
      if (this.ssdShards !== null) await this.ssdShards.load();
      this.paramGroup.unshard();
      if (shared.root.trainingState === 'FORWARD') {
        // The limit's units ahead, and one more: the one after the nearest, whose shards a store
        // reads ahead.
        const ahead = shared.aheadInForward(this, Math.max(2, this.options.limitAllGathers));
        await shared.prefetch(ahead, this === shared.root, this.options.limitAllGathers);
      }
      await this.paramGroup.waitForUnshard();
      if (this.ssdShards !== null) await this.ssdShards.release();
      const lent = await this.borrowed.gather();
      output = (await this.module.call(...inputs)) as Awaited<Out>;
      const hooked = isGradEnabled()
        ? shared.hookOutputs(output, (call, nested, running) =>
            this.backwardHooks.preBackward(call, nested, running),
          )
        : 0;
      const keepFull =
        hooked > 0 &&
        (!this.options.reshardAfterForward || (this.isRoot && this.options.disableReshardOnRoot));
      if (!keepFull) {
        this.paramGroup.reshard();
        this.borrowed.reshard(lent);
      }
      return output;
    } finally {
      this.trainingState = 'IDLE';
      freeCasts(casts, output, this.options);
    }
  }

  /**
   * Run `fn` without reducing gradients: they accumulate in full on every rank, to be reduced by
   * the first backward outside it (PyTorch's `no_sync`). The full parameters are freed after each
   * unit's backward as after its forward (`reshardAfterForward`, not on the root with
   * `disableReshardOnRoot`), else they stay gathered, as in fairscale. Do not step the optimizer
   * inside.
   */
  async noSync<T>(fn: () => T | Promise<T>): Promise<T> {
    const units = this.units();
    for (const u of units) u.requireGradSync = false;
    try {
      return await fn();
    } finally {
      for (const u of units) u.requireGradSync = true;
    }
  }

  /**
   * Run `fn` with the full FP32 parameters in the module (see `summonFullParams`): changes are
   * written back into the shards unless `volatile`; resharded on exit, on error too.
   */
  summonFullParams<T>(fn: () => T | Promise<T>, options: SummonOptions = {}): Promise<T> {
    return summonFullParams(this, fn, options);
  }

  /**
   * `apply(fn)` with the full parameters gathered, writing changes back (fairscale's `apply`): `fn`
   * sees every module of the wrapped model, nested units too, in `Module.apply`'s order (children
   * before their parent, children in registration order), so an initializer that draws random
   * numbers gives the unwrapped model's weights.
   */
  async applyFullParams(fn: (module: Module) => void | Promise<void>): Promise<this> {
    await applyWithFullParams(this, fn);
    return this;
  }

  /**
   * Divide gradients by `pre` before the reduce-scatter and by `post` after it (fairscale's
   * `set_gradient_divide_factors`), in this unit and, with `recursive`, in every unit under it.
   * Only between steps (IDLE); a factor that is not a finite number > 0 is a `FsdpConfigError`.
   * `pre * post` should be the world size for an average.
   */
  setGradientDivideFactors(pre: number, post: number, recursive: boolean): void {
    const op = 'setGradientDivideFactors';
    finitePositive(op, 'pre', pre);
    finitePositive(op, 'post', post);
    const units = recursive ? this.units() : [this];
    for (const unit of units) unit.assertState(op, ['IDLE']);
    for (const unit of units) {
      const settings = unit.paramGroup.settings;
      unit.paramGroup.settings = { ...settings, predivide: pre, postdivide: post };
    }
  }

  /** The factors gradients are divided by before and after the reduce-scatter. */
  get gradientDivideFactors(): { readonly pre: number; readonly post: number } {
    const { predivide, postdivide } = this.paramGroup.settings;
    return { pre: predivide, post: postdivide };
  }

  /**
   * Declare that this unit's module uses `param`, a parameter another unit holds (fairscale's
   * `append_shared_param`): the owner is gathered around this unit's forward and from its
   * pre-backward ([Note: parameters shared across units]). A shared parameter registered in this
   * unit's module is found at wrap time; this is for one the module reaches otherwise (a closure).
   * Pass the tensor the owner's module computes with. Before the first forward only; a parameter no
   * other unit holds is a `FsdpWrapError`.
   */
  appendSharedParam(param: Tensor): void {
    appendShared(this, this.borrowed, param, this.shared !== null);
  }

  /**
   * Call the wrapped module's `resetParameters()` with the full parameters gathered, writing the
   * result back into the shards (fairscale's `reset_parameters`, which calls it on the flattened
   * parameters). Only with `allowResetParameters`; otherwise, or when the module has no
   * `resetParameters`, a `FsdpConfigError`.
   */
  resetParameters(): Promise<void> {
    return resetWithFullParams(this);
  }

  /** The unit's settings on one line (fairscale's `extra_repr`); every option with `verbose`. */
  extraRepr(): string {
    return extraRepr(this.options, this.isRoot);
  }

  /** The module tree, each unit with its `extraRepr`, as PyTorch prints a module. */
  override toString(): string {
    return moduleTree(this, (m) => (m instanceof FullyShardedDataParallel ? m.extraRepr() : null));
  }

  /** Throw a `FsdpStateError` unless the unit is in one of `states`. */
  assertState(op: string, states: readonly TrainingState[]): void {
    if (!states.includes(this.trainingState)) {
      const detail =
        this.trainingState === 'SUMMON_FULL_PARAMS'
          ? `${op} is not allowed inside summonFullParams`
          : `${op} is not allowed now`;
      throw new FsdpStateError(op, this.unitName, this.rank, this.trainingState, states, detail);
    }
  }

  /** The shared state, made by the root on its first forward. */
  private async lazyInit(): Promise<FsdpSharedState<FullyShardedDataParallel>> {
    if (this.shared !== null) return this.shared;
    const units = this.units();
    const shared = new FsdpSharedState(this, units);
    for (const [path, m] of this.namedModules()) {
      if (m instanceof FullyShardedDataParallel) {
        m.shared = shared;
        m.path = cleanPath(path);
      }
    }
    await castBuffers(this.module, this.options);
    return shared;
  }
}

/** Whether `m` is a unit. */
function isUnit(m: Module): m is FullyShardedDataParallel {
  return m instanceof FullyShardedDataParallel;
}

/** PyTorch's and fairscale's short name. */
export const FSDP = FullyShardedDataParallel;
