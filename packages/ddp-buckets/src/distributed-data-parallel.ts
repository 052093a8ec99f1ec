import type { ProcessGroup } from '@webshard/collectives';
import {
  type DType,
  Module,
  type RemovableHandle,
  type RunningBackward,
  type Tensor,
} from '@webshard/tensor-core';
import {
  type DistributedDataParallelOptions,
  type ResolvedOptions,
  resolveOptions,
} from './api.js';
import { type AllreduceMode, AutoModeTrial, type AutoTimings } from './auto-mode.js';
import { Bucket, type BucketDType } from './bucket.js';
import { isPermutation, type PlanParam, planBuckets, planPerDType } from './bucket-plan.js';
import {
  DdpArgumentError,
  DdpError,
  DdpGroupAbortedError,
  DdpParameterMismatchError,
  DdpStateError,
  DdpUnusedParameterError,
} from './errors.js';
import { Reducer } from './reducer.js';

/** Where the wrapper is in a training step (asserted transitions, see `transition`). */
export type DdpState = 'constructing' | 'idle' | 'forwarded' | 'backward' | 'failed';

const NO_MISMATCH = 0x7fffffff;

/**
 * Data-parallel training: wraps a module that every rank of `group` holds a replica of, and after
 * each backward leaves every rank with the gradients averaged over the ranks, all-reduced in flat
 * buckets while backward still runs (apex's and PyTorch's `DistributedDataParallel`).
 * Construction broadcasts rank 0's parameters and buffers and checks that every rank wraps the same
 * parameters; `forward` waits for that, so call it with `await ddp.call(...)`.
 * See [Note: bucket order] and [Note: when each bucket goes].
 */
export class DistributedDataParallel<
  Args extends unknown[] = unknown[],
  Out = unknown,
> extends Module<Args, Promise<Awaited<Out>>> {
  readonly module: Module<Args, Out>;
  readonly group: ProcessGroup;
  /** Settles when the initial broadcast and the parameter check are done; rejects with their error. */
  readonly ready: Promise<void>;
  private readonly options: ResolvedOptions;
  private readonly named: readonly [string, Tensor][];
  private stateValue: DdpState = 'constructing';
  private failure: unknown = null;
  private noSyncDepth = 0;
  private syncThisStep = true;
  /** The parameters that require grad, as planned; null until the first forward. */
  private planned: Tensor[] | null = null;
  private refreshing = true;
  private recorded: number[] = [];
  private reducer: Reducer | null = null;
  private hooks: RemovableHandle[] = [];
  private waitMs = 0;
  /** `delayAllreduce: 'auto'`: the trial, the reducer of each mode while it runs, and this step's. */
  private trial: AutoModeTrial | null = null;
  private trialReducers: Record<AllreduceMode, Reducer> | null = null;
  private timedStep: { mode: AllreduceMode; start: number } | null = null;

  constructor(module: Module<Args, Out>, options: DistributedDataParallelOptions) {
    super();
    this.options = resolveOptions(options);
    this.group = this.options.group;
    const named = module.namedParameters();
    if (named.length === 0) {
      throw new DdpArgumentError(
        this.fields('DistributedDataParallel'),
        'module',
        `${module.typeName} has no parameters to train`,
      );
    }
    for (const [name, p] of named) {
      if (p.dtype !== 'f32' && p.dtype !== 'f16' && p.dtype !== 'bf16') {
        throw new DdpArgumentError(
          this.fields('DistributedDataParallel'),
          'module',
          `parameter '${name}' is ${p.dtype}: gradients are reduced as f32, f16 or bf16`,
        );
      }
    }
    this.named = named;
    if (this.options.delayAllreduce === 'auto') this.trial = new AutoModeTrial();
    this.module = this.registerModule('module', module);
    this.ready = this.initialize();
    // A failure is reported by `forward` (or whoever awaits `ready`), never as an unhandled rejection.
    this.ready.catch(() => {});
  }

  /**
   * Milliseconds the last synchronized backward spent at its end on communication: waiting for
   * the buckets' all-reduces (and, with `delayAllreduce`, sending them) and writing them back. The
   * communication that overlapped with backward is not in it.
   */
  get lastReduceWaitMs(): number {
    return this.waitMs;
  }

  /**
   * When the all-reduce runs: `'overlap'` or `'delay'`, or `'deciding'` while
   * `delayAllreduce: 'auto'` still times both ([Note: choosing overlap by measurement]).
   */
  get allreduceMode(): AllreduceMode | 'deciding' {
    if (this.trial !== null) return this.trial.decided ?? 'deciding';
    return this.options.delayAllreduce === true ? 'delay' : 'overlap';
  }

  /** What `delayAllreduce: 'auto'` measured once it chose; null before, and without it. */
  get autoTimings(): AutoTimings | null {
    return this.trial?.timings ?? null;
  }

  /** Where the wrapper is in a training step. */
  get state(): DdpState {
    return this.stateValue;
  }

  /** Whether the next backward records gradient order and rebuilds the buckets (apex's name). */
  get needsRefresh(): boolean {
    return this.refreshing || !sameList(this.planned, this.gradParams());
  }

  /**
   * Run the wrapped module. Resolves after the construction-time broadcast; the backward of its
   * output reduces the gradients (unless inside `noSync`).
   */
  async forward(...args: Args): Promise<Awaited<Out>> {
    await this.ready;
    this.assertUsable('forward');
    if (this.stateValue === 'backward') {
      throw new DdpStateError(
        this.fields('forward'),
        'backward',
        'forward called while a backward is running',
      );
    }
    this.syncThisStep = this.noSyncDepth === 0;
    if (this.syncThisStep && this.needsRefresh) this.replan();
    this.timedStep = null;
    if (this.syncThisStep && this.trialReducers !== null) {
      const mode = this.trial!.next();
      this.reducer = this.trialReducers[mode];
      this.timedStep = { mode, start: performance.now() };
    }
    this.stateValue = 'forwarded';
    return (await this.module.call(...args)) as Awaited<Out>;
  }

  /**
   * Run `fn` (forward and backward of micro-batches) without reducing gradients: they accumulate
   * locally, and the first backward after `noSync` reduces the sum (PyTorch's `no_sync`).
   */
  async noSync<T>(fn: () => T | Promise<T>): Promise<T> {
    this.noSyncDepth++;
    try {
      return await fn();
    } finally {
      this.noSyncDepth--;
    }
  }

  /**
   * The buckets as planned now, each as its parameters' names in reduction order (empty before
   * the first backward has recorded the order; one bucket per dtype with `delayAllreduce`).
   */
  bucketParameterNames(): string[][] {
    if (this.reducer === null || this.refreshing) return [];
    const names = new Map(this.named.map(([n, p]) => [p, n]));
    return this.reducer.buckets.map((b) => b.params.map((p) => names.get(p) ?? String(p)));
  }

  /** Remove the hooks and release the bucket buffers. */
  dispose(): void {
    for (const h of this.hooks) h.remove();
    this.hooks = [];
    this.reducer?.dispose();
    if (this.trialReducers !== null) {
      for (const r of Object.values(this.trialReducers)) if (r !== this.reducer) r.dispose();
    }
    this.trialReducers = null;
    this.reducer = null;
  }

  /**
   * Why the group aborted when no op of this wrapper saw it fail (a peer lost between two steps,
   * or while this rank computed): the transport's reason, as the rank that raised it wrote it.
   */
  private abortCause(): Error | undefined {
    const reason = this.group.transport.abortReason;
    return reason === null ? undefined : new Error(reason.message, { cause: reason });
  }

  private fields(op: string) {
    return { op, rank: this.options?.group.rank ?? -1 };
  }

  private assertUsable(op: string): void {
    if (this.group.state === 'aborted') {
      this.stateValue = 'failed';
      throw new DdpGroupAbortedError(this.fields(op), this.failure ?? this.abortCause());
    }
    if (this.stateValue === 'failed') {
      throw new DdpStateError(
        this.fields(op),
        'failed',
        'the wrapper failed in an earlier step',
        this.failure,
      );
    }
  }

  private gradParams(): Tensor[] {
    return this.named.filter(([, p]) => p.requiresGrad).map(([, p]) => p);
  }

  private async initialize(): Promise<void> {
    const group = this.group;
    const described = [
      ...this.named.map(([n, p]) => `parameter ${n} [${p.shape.join(', ')}] ${p.dtype}`),
      ...this.module
        .namedBuffers()
        .map(([n, b]) => `buffer ${n} [${b.shape.join(', ')}] ${b.dtype}`),
    ];
    const bytes = new TextEncoder().encode(JSON.stringify(described));
    const length = Int32Array.of(bytes.length);
    await group.broadcast(length, 0).wait();
    const words = new Int32Array(Math.ceil(length[0]! / 4));
    if (group.rank === 0) new Uint8Array(words.buffer).set(bytes);
    await group.broadcast(words, 0).wait();
    const theirs = JSON.parse(
      new TextDecoder().decode(new Uint8Array(words.buffer, 0, length[0]!)),
    ) as string[];
    let first = -1;
    for (let i = 0; i < Math.max(theirs.length, described.length); i++) {
      if (theirs[i] !== described[i]) {
        first = i;
        break;
      }
    }
    const key = Int32Array.of(first < 0 ? NO_MISMATCH : first * group.size + group.rank);
    await group.allReduce(key, { op: 'min' }).wait();
    if (key[0] !== NO_MISMATCH) {
      const index = Math.floor(key[0]! / group.size);
      const rank = key[0]! % group.size;
      const reference = theirs[index] ?? 'nothing';
      const name = (theirs[index] ?? described[index] ?? '?').split(' ')[1] ?? '?';
      const here = rank === group.rank ? `; this rank has ${described[index] ?? 'nothing'}` : '';
      throw new DdpParameterMismatchError(
        this.fields('DistributedDataParallel'),
        index,
        name,
        rank,
        `ranks wrap different parameters: entry #${index} is ${reference} on rank 0 but differs on rank ${rank}${here}`,
      );
    }
    const works = [...this.named.map(([, p]) => p), ...this.module.buffers()].map((t) =>
      group.broadcast(t, 0),
    );
    for (const work of works) await work.wait();
    this.stateValue = 'idle';
  }

  /** Drop the current buckets and hook every parameter that requires grad; the next backward records. */
  private replan(): void {
    this.dispose();
    // A plan rebuilt before the choice restarts the trial (its steps timed other buckets).
    if (this.trial !== null && this.trial.decided === null) this.trial = new AutoModeTrial();
    const params = this.gradParams();
    this.planned = params;
    this.refreshing = true;
    this.recorded = [];
    this.hooks = params.map((p, index) =>
      p.registerPostAccumulateGradHook((_param, running) => this.onGrad(p, index, running)),
    );
    const plan = planPerDType(
      this.planParams(params),
      params.map((_, i) => i),
    );
    this.reducer = this.makeReducer(params, plan, 'at-end');
  }

  private planParams(params: readonly Tensor[]): PlanParam[] {
    const triggers = this.options.allreduceTriggerParams;
    const names = new Map(this.named.map(([n, p]) => [p, n]));
    return params.map((p) => ({
      name: names.get(p) ?? String(p),
      dtype: p.dtype,
      size: p.size,
      trigger: triggers?.has(p) ?? false,
    }));
  }

  private makeReducer(
    params: readonly Tensor[],
    plan: readonly { dtype: DType; params: readonly number[] }[],
    mode: 'overlap' | 'at-end',
  ): Reducer {
    const { gradientAverage, gradientPredivideFactor: factor, allreduceAlwaysFp32 } = this.options;
    const buckets = plan.map((b) => {
      const dtype = b.dtype as BucketDType;
      const comm: BucketDType = allreduceAlwaysFp32 ? 'f32' : dtype;
      return new Bucket(
        this.group,
        b.params.map((i) => params[i]!),
        dtype,
        comm,
      );
    });
    const post = gradientAverage ? factor / this.group.size : factor;
    const group = this.group;
    return new Reducer(buckets, mode, 1 / factor, post, this.options.retainAllreduceBuffers, () =>
      group.progress(),
    );
  }

  private async onGrad(param: Tensor, index: number, running: RunningBackward): Promise<void> {
    if (this.stateValue === 'idle') {
      throw new DdpStateError(
        this.fields('backward'),
        'idle',
        'backward ran twice without a forward in between (each backward needs its own forward)',
      );
    }
    this.assertUsable('backward');
    if (this.stateValue === 'forwarded') {
      this.stateValue = 'backward';
      if (this.syncThisStep) this.reducer!.begin();
      running.queueCallback(() => this.endBackward());
    }
    if (!this.syncThisStep) return;
    if (this.refreshing) this.recorded.push(index);
    await this.reducer!.gradReady(param);
  }

  private async endBackward(): Promise<void> {
    try {
      if (!this.syncThisStep) return;
      const reducer = this.reducer!;
      const missing = reducer.missing();
      if (missing.length > 0 || !reducer.allStarted) {
        const names = new Map(this.named.map(([n, p]) => [p, n]));
        throw new DdpUnusedParameterError(
          this.fields('backward'),
          missing.map((p) => names.get(p) ?? String(p)),
        );
      }
      const start = performance.now();
      await reducer.finish();
      this.waitMs = performance.now() - start;
      if (this.refreshing) await this.rebuild();
      else if (this.timedStep !== null) await this.timeStep(this.timedStep);
    } catch (error) {
      this.stateValue = 'failed';
      this.failure = error;
      if (this.group.state === 'aborted' && !DdpError.isInstance(error)) {
        throw new DdpGroupAbortedError(this.fields('backward'), error);
      }
      throw error;
    } finally {
      if (this.stateValue === 'backward') this.stateValue = 'idle';
    }
  }

  /** `delayAllreduce: 'auto'`: one timed step; once both modes have theirs, choose (a collective). */
  private async timeStep(step: { mode: AllreduceMode; start: number }): Promise<void> {
    this.timedStep = null;
    if (!this.trial!.record(step.mode, performance.now() - step.start)) return;
    const mode = await this.trial!.decide(this.group);
    const reducers = this.trialReducers!;
    this.trialReducers = null;
    this.reducer = reducers[mode];
    reducers[mode === 'delay' ? 'overlap' : 'delay'].dispose();
  }

  /** After the recording iteration: agree on rank 0's order and build the overlapped buckets. */
  private async rebuild(): Promise<void> {
    const params = this.planned!;
    const planParams = this.planParams(params);
    this.refreshing = false;
    const delay = this.options.delayAllreduce;
    if (delay === true || (delay === 'auto' && this.trial!.decided === 'delay')) return;
    const order = Int32Array.from(this.recorded);
    await this.group.broadcast(order, 0).wait();
    if (!isPermutation([...order], params.length)) {
      throw new DdpStateError(
        this.fields('backward'),
        'backward',
        `rank 0's gradient order does not cover this rank's ${params.length} parameters that require grad`,
      );
    }
    const plan = planBuckets(planParams, [...order], this.options.messageSize);
    const overlap = this.makeReducer(params, plan, 'overlap');
    if (delay === 'auto' && this.trial!.decided === null) {
      // The at-end reducer the recording used is the delayed mode's: keep both while timing.
      this.trialReducers = { delay: this.reducer!, overlap };
      return;
    }
    this.reducer?.dispose();
    this.reducer = overlap;
  }
}

function sameList(a: readonly Tensor[] | null, b: readonly Tensor[]): boolean {
  return a !== null && a.length === b.length && a.every((t, i) => t === b[i]);
}
