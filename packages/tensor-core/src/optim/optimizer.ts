import {
  ArgumentError,
  BackendError,
  DTypeError,
  FreedTensorError,
  ShapeError,
} from '../errors.js';
import { keep } from '../scope.js';
import { Tensor } from '../tensor.js';

/** A parameter group as given to an optimizer: its tensors and any hyperparameters to override. */
export type ParamGroupInput<H> = { params: Iterable<Tensor> } & Partial<H>;

/** A parameter group of an optimizer: its tensors and its hyperparameters (mutable, for schedules). */
export type ParamGroup<H> = { params: Tensor[] } & H;

/** Per-parameter state in a state dict: numbers and tensors keyed by PyTorch's names. */
export type OptimizerParamState = Record<string, number | Tensor | null>;

/**
 * An optimizer's state in PyTorch's layout: `state` keyed by the parameter's index (counting
 * through the groups in order), `param_groups` with PyTorch's snake_case hyperparameter names and
 * `params` as those indices.
 */
export interface OptimizerStateDict {
  state: Record<number, OptimizerParamState>;
  param_groups: (Record<string, unknown> & { params: number[] })[];
}

/** Options of `step`. */
export interface StepOptions {
  /**
   * Multiply each gradient by this before using it (the loss scaler's 1/scale, or 1/worldSize when
   * gradients were summed): fused into the update kernel, the `.grad` tensors are left as they are.
   */
  gradScale?: number;
}

/**
 * [Note: optimizers]
 * An optimizer steps on whatever tensors it is given: module parameters, FSDP's flat shards, fp32
 * masters of a mixed-precision model. It reads `.grad` of each, skips those without one, and
 * updates in place with the backend's fused kernel, so a parameter keeps its identity and storage
 * (views into a flat buffer stay views). State tensors are created lazily on the parameter's
 * backend at its first step, like PyTorch. Hyperparameters live on the groups and may be changed
 * between steps (learning-rate schedules).
 */
const managed = new WeakMap<Tensor, string>();

/**
 * Mark `param` as one an optimizer must not step: a sharding wrapper owns its storage and keeps its
 * gradient elsewhere (FSDP's original parameters, whose flat shard is what steps). `reason` says
 * what to step instead; an optimizer given `param` throws `ArgumentError` with it.
 */
export function markManagedParameter(param: Tensor, reason: string): void {
  managed.set(param, reason);
}

/**
 * [Note: parameters held elsewhere]
 * A sharding wrapper may keep a parameter's storage, its gradient and its optimizer state out of
 * memory between uses (FSDP's `ssdOffload` keeps them in files). It registers a `ParamHolder` for
 * the parameter (`holdParameter`), and every optimizer calls it around each use, so an unchanged
 * `optimizer.step()` and `stateDict()` work on such parameters:
 * - `acquire(param, state, 'step')` before a step reads the parameter, its `.grad` and its state
 *   (undefined before the first step), bringing whatever is not in memory back;
 * - `afterStep(param, state)` once that parameter is stepped (state made by then), to write them
 *   back and free them: a step holds one parameter's tensors at a time, not all of them;
 * - `acquire(param, state, 'stateDict')` before `stateDict()` hands out the state's tensors, which
 *   stay in memory until the holder frees them (its next `afterStep`).
 * The hooks are synchronous because `step()` and `stateDict()` are; a holder that cannot bring its
 * tensors back synchronously throws a typed error saying what to call instead. A parameter without a
 * gradient is not acquired for a step, and `checkGrads` leaves a held parameter's freed gradient to
 * its holder (the update kernel still refuses one the holder left freed).
 */
export interface ParamHolder {
  /** Bring `param`, its `.grad` (for a step) and the tensors of `state` into memory. */
  acquire(param: Tensor, state: object | undefined, use: 'step' | 'stateDict'): void;
  /** `param` was stepped: write it, its gradient and `state` back where they live and free them. */
  afterStep(param: Tensor, state: object): void;
}

const holders = new WeakMap<Tensor, ParamHolder>();

/**
 * Register `holder` around every optimizer's use of `param` ([Note: parameters held elsewhere]);
 * null removes it.
 */
export function holdParameter(param: Tensor, holder: ParamHolder | null): void {
  if (holder === null) holders.delete(param);
  else holders.set(param, holder);
}

export abstract class Optimizer<H extends object, S extends object> {
  readonly paramGroups: ParamGroup<H>[] = [];
  /** Per-parameter state, created at a parameter's first step. */
  readonly state = new Map<Tensor, S>();
  constructor(
    /** The optimizer's name, for error messages (`Adam`, `AdamW`, `SGD`). */
    protected readonly opName: string,
    params: Iterable<Tensor> | Iterable<ParamGroupInput<H>>,
    protected readonly defaults: H,
  ) {
    const list = [...(params as Iterable<Tensor | ParamGroupInput<H>>)];
    if (list.length === 0) throw new ArgumentError('optimizer', 'got an empty parameter list');
    if (list.every((p) => p instanceof Tensor)) {
      this.addParamGroup({ params: list as Tensor[] } as unknown as ParamGroupInput<H>);
    } else {
      for (const group of list) {
        if (group instanceof Tensor) {
          throw new ArgumentError('optimizer', 'mix of tensors and parameter groups');
        }
        this.addParamGroup(group);
      }
    }
  }

  /** Add a group; hyperparameters it leaves out come from the optimizer's defaults. */
  addParamGroup(group: ParamGroupInput<H>): void {
    const params = [...group.params];
    const seen = new Set(this.paramGroups.flatMap((g) => g.params));
    for (const p of params) {
      const reason = managed.get(p);
      if (reason !== undefined) {
        throw new ArgumentError(this.opName, `parameter ${p.name ?? String(p)} ${reason}`);
      }
      if (seen.has(p)) {
        throw new ArgumentError(
          this.opName,
          `parameter ${p} appears in more than one parameter group (or twice in one)`,
        );
      }
      seen.add(p);
    }
    const full = { ...this.defaults, ...group, params } as ParamGroup<H>;
    this.validate(full);
    this.paramGroups.push(full);
  }

  protected abstract validate(group: ParamGroup<H>): void;

  /** One update of every parameter that has a gradient. */
  abstract step(options?: StepOptions): void;

  /**
   * Check every gradient a step would use against its parameter, before any parameter changes: the
   * same shape (a sharding wrapper swapping full and shard gradients must not hand over the wrong
   * one), the same backend and dtype, not freed. Throws `ShapeError`, `BackendError`, `DTypeError`
   * or `FreedTensorError` naming the optimizer and the parameter.
   */
  protected checkGrads(): void {
    for (const group of this.paramGroups) {
      for (const p of group.params) {
        const grad = p.grad;
        if (grad === null) continue;
        const name = p.name ?? String(p);
        if (grad.isFreed && !holders.has(p)) {
          throw new FreedTensorError(this.opName, `${name}.grad`);
        }
        if (
          grad.size !== p.size ||
          grad.shape.some((d, i) => d !== p.shape[i]) ||
          grad.rank !== p.rank
        ) {
          throw new ShapeError(
            this.opName,
            [p.shape, grad.shape],
            `the gradient of parameter ${name} does not have its shape`,
          );
        }
        if (grad.backend !== p.backend) {
          throw new BackendError(
            this.opName,
            `the gradient of parameter ${name} is on ${grad.backend.kind}, the parameter on ${p.backend.kind} (another backend instance)`,
          );
        }
        if (grad.dtype !== p.dtype) {
          throw new DTypeError(
            this.opName,
            [p.dtype, grad.dtype],
            `the gradient of parameter ${name} does not have its dtype`,
          );
        }
      }
    }
  }

  /**
   * Run `update` on each parameter that has a gradient, in group order, inside its holder's
   * `acquire` and `afterStep` where it has one ([Note: parameters held elsewhere]). `update` makes
   * the parameter's state when it has none.
   */
  protected forEachGrad(update: (group: ParamGroup<H>, param: Tensor, grad: Tensor) => void): void {
    for (const group of this.paramGroups) {
      for (const p of group.params) {
        if (p.grad === null) continue;
        const holder = holders.get(p);
        if (holder === undefined) {
          update(group, p, p.grad);
          continue;
        }
        holder.acquire(p, this.state.get(p), 'step');
        try {
          update(group, p, p.grad!);
        } finally {
          const state = this.state.get(p);
          if (state !== undefined) holder.afterStep(p, state);
        }
      }
    }
  }

  /** Every parameter of every group, in order (the indices of the state dict). */
  get params(): Tensor[] {
    return this.paramGroups.flatMap((g) => g.params);
  }

  /** Clear gradients: set `.grad` to null (default, frees it) or fill it with zeros. */
  zeroGrad(options: { setToNone?: boolean } = {}): void {
    zeroGrads(this.params, options.setToNone ?? true);
  }

  protected abstract groupToDict(group: ParamGroup<H>): Record<string, unknown>;
  protected abstract groupFromDict(dict: Record<string, unknown>): Partial<H>;
  protected abstract stateToDict(state: S): OptimizerParamState;
  protected abstract stateFromDict(param: Tensor, dict: OptimizerParamState): Promise<S>;

  /**
   * The state in PyTorch's layout. Tensors are the optimizer's own (not copies); a held parameter's
   * are brought into memory first ([Note: parameters held elsewhere]).
   */
  stateDict(): OptimizerStateDict {
    const state: Record<number, OptimizerParamState> = {};
    const groups: OptimizerStateDict['param_groups'] = [];
    let index = 0;
    for (const group of this.paramGroups) {
      const indices: number[] = [];
      for (const p of group.params) {
        const s = this.state.get(p);
        if (s !== undefined) {
          holders.get(p)?.acquire(p, s, 'stateDict');
          state[index] = this.stateToDict(s);
        }
        indices.push(index++);
      }
      groups.push({ ...this.groupToDict(group), params: indices });
    }
    return { state, param_groups: groups };
  }

  /**
   * Load a state in PyTorch's layout: group count and sizes must match this optimizer's; state
   * tensors are copied onto each parameter's backend.
   */
  async loadStateDict(dict: OptimizerStateDict): Promise<void> {
    const op = `${this.opName}.loadStateDict`;
    if (dict.param_groups.length !== this.paramGroups.length) {
      throw new ArgumentError(
        op,
        `the state dict has ${dict.param_groups.length} parameter groups, the optimizer ${this.paramGroups.length}`,
      );
    }
    const byIndex = new Map<number, Tensor>();
    dict.param_groups.forEach((g, i) => {
      const group = this.paramGroups[i]!;
      if (g.params.length !== group.params.length) {
        throw new ArgumentError(
          op,
          `parameter group ${i} has ${g.params.length} parameters in the state dict and ${group.params.length} in the optimizer`,
        );
      }
      g.params.forEach((index, j) => {
        byIndex.set(index, group.params[j]!);
      });
    });
    const loaded = new Map<Tensor, S>();
    for (const [key, value] of Object.entries(dict.state)) {
      const param = byIndex.get(Number(key));
      if (param === undefined) {
        throw new ArgumentError(op, `state for parameter index ${key}, which no group lists`);
      }
      loaded.set(param, await this.stateFromDict(param, value));
    }
    dict.param_groups.forEach((g, i) => {
      Object.assign(this.paramGroups[i]!, this.groupFromDict(g));
    });
    for (const s of this.state.values()) freeState(s);
    this.state.clear();
    for (const [p, s] of loaded) this.state.set(p, s);
  }
}

/** Clear `.grad` of each tensor: set to null (freeing it) or fill with zeros. */
export function zeroGrads(params: Iterable<Tensor>, setToNone: boolean): void {
  for (const p of params) {
    const g = p.grad;
    if (g === null) continue;
    if (setToNone) {
      g.free();
      p.grad = null;
    } else {
      g.backend.fill(g.kernel('zeroGrad'), 0);
    }
  }
}

function freeState(state: object): void {
  for (const v of Object.values(state)) if (v instanceof Tensor) v.free();
}

/** A zero-filled f32 state tensor shaped like `param`, on its backend. */
export function zerosState(param: Tensor): Tensor {
  const t = keep(Tensor.empty(param.backend, param.shape, 'f32'));
  param.backend.fill(t.kernel('optimizer state'), 0);
  return t;
}

/** Copy a loaded state tensor into a new f32 tensor shaped like `param`, on its backend. */
export async function stateTensorFrom(op: string, param: Tensor, value: unknown): Promise<Tensor> {
  if (!(value instanceof Tensor)) {
    throw new ArgumentError(op, `expected a tensor in the state of ${param}, got ${typeof value}`);
  }
  if (value.size !== param.size) {
    throw new ShapeError(op, [value.shape, param.shape], `state does not match ${param}`);
  }
  const out = keep(Tensor.empty(param.backend, param.shape, 'f32'));
  if (value.backend === param.backend) {
    param.backend.cast(value.kernel(op), out.kernel(op));
  } else {
    out.write(await value.read());
  }
  return out;
}

/** A number from a loaded state: a number, or a one-element tensor (PyTorch saves `step` so). */
export async function numberFrom(
  op: string,
  dict: OptimizerParamState,
  key: string,
): Promise<number> {
  const v = dict[key];
  if (typeof v === 'number') return v;
  if (v instanceof Tensor && v.size === 1) return await v.item();
  throw new ArgumentError(op, `'${key}' is missing or not a number`);
}
