import type { Backend } from '../backend/backend.js';
import type { DType } from '../dtype.js';
import { withAutocastExcluded } from '../autocast-state.js';
import { FreedTensorError } from '../errors.js';
import { keep } from '../scope.js';
import type { GradNodeLike, Tensor } from '../tensor.js';
import { isTensor } from '../tensor-brand.js';
import { AutogradError } from './errors.js';
import { HookList } from './hooks.js';
import type { RunningBackward } from './running-backward.js';

/** Shape, dtype and backend of a tensor, kept by nodes instead of the tensor itself. */
export interface TensorMeta {
  readonly shape: readonly number[];
  readonly dtype: DType;
  readonly backend: Backend;
}

export function metaOf(tensor: Tensor): TensorMeta {
  return { shape: tensor.shape, dtype: tensor.dtype, backend: tensor.backend };
}

export type VoidOrPromise = void | Promise<void>;

/** A gradient hook on a tensor: may return a replacement gradient; may be async. */
export type TensorHook = (
  grad: Tensor,
  backward: RunningBackward,
) => Tensor | undefined | Promise<Tensor | undefined>;
/** Runs after a leaf's gradient was accumulated into `.grad`; may be async. */
export type PostAccumulateGradHook = (param: Tensor, backward: RunningBackward) => VoidOrPromise;

/** Where a gradient goes: output `index` of `node`. */
export interface Edge {
  readonly node: GradNode;
  readonly index: number;
}

let nextSequenceNr = 0;

/**
 * [Note: saved tensors]
 * A gradient reads some of its op's inputs and outputs. How a node keeps them decides both memory
 * and what FSDP may do between forward and backward:
 * - a leaf that requires grad, or a module parameter (`markParameter`), is saved BY REFERENCE: the
 *   node keeps the tensor object and reads whatever storage it holds when backward runs. FSDP may
 *   free a parameter after forward (`param.free()`) and rebuild it (`param.setData(full)`) before
 *   its gradient is needed; if it is still freed then, backward throws `FreedTensorError` naming
 *   the parameter.
 * - a view of such a tensor (a `reshape` of a weight, made by `matmul` on its way to the 3-D
 *   kernel) is saved as its base plus shape and element offset, and rebuilt over the base's storage
 *   of the moment: retaining the view's storage would pin the full parameter FSDP means to free.
 * - anything else (activations, masks, integer targets, layer norm statistics) is saved by
 *   RETAINING its storage: the node holds a detached view (one `TensorStorage` reference), kept out of
 *   `tidy` scopes, and frees it as soon as its backward has run (unless `retainGraph`). So
 *   intermediate memory drops during backward.
 * A graph that is never backpropagated releases its retained storage when its nodes are garbage
 * collected (a `FinalizationRegistry` safety net); run evaluation under `noGrad` to not record one.
 */
const parameters = new WeakSet<Tensor>();
const viewBases = new WeakMap<Tensor, { base: Tensor; offset: number }>();

/** Mark a tensor as a parameter: autograd saves it by reference (see [Note: saved tensors]). */
export function markParameter(tensor: Tensor): void {
  parameters.add(tensor);
}

/** Whether `tensor` is a parameter (`markParameter`). */
export function isParameter(tensor: Tensor): boolean {
  return parameters.has(tensor);
}

export function savedByReference(tensor: Tensor): boolean {
  return tensor.isLeaf && (tensor.requiresGrad || parameters.has(tensor));
}

/**
 * Note that `output` shares `input`'s storage (a recorded view op). If `input` is saved by
 * reference, or is itself such a view, `output` is saved as a view of the same base.
 */
export function noteView(output: Tensor, input: Tensor): void {
  if (output.isFreed || input.isFreed || output.storage() !== input.storage()) return;
  const inner = viewBases.get(input);
  if (inner !== undefined) {
    viewBases.set(output, {
      base: inner.base,
      offset: inner.offset + output.offset - input.offset,
    });
  } else if (savedByReference(input)) {
    viewBases.set(output, { base: input, offset: output.offset - input.offset });
  }
}

const finalizer = new FinalizationRegistry<Tensor[]>((held) => {
  for (const t of held) t.free();
});

type SavedKind =
  | { readonly kind: 'reference'; readonly tensor: Tensor }
  | {
      readonly kind: 'view';
      readonly base: Tensor;
      readonly offset: number;
      readonly shape: readonly number[];
    }
  | { readonly kind: 'retained'; readonly tensor: Tensor }
  | { readonly kind: 'released' };

/** One tensor saved for backward; see [Note: saved tensors]. */
export class SavedTensor {
  private saved: SavedKind;

  constructor(source: Tensor) {
    const view = viewBases.get(source);
    if (savedByReference(source)) {
      this.saved = { kind: 'reference', tensor: source };
    } else if (view !== undefined) {
      this.saved = { kind: 'view', base: view.base, offset: view.offset, shape: source.shape };
    } else {
      const held = keep(source.detach());
      held.name = source.name;
      this.saved = { kind: 'retained', tensor: held };
    }
  }

  /** The retained view (for the finalizer), or null when nothing is retained. */
  get retained(): Tensor | null {
    return this.saved.kind === 'retained' ? this.saved.tensor : null;
  }

  /**
   * The tensor for backward of `op`. Throws `FreedTensorError` naming a freed parameter. A view of
   * a parameter is rebuilt over the parameter's current storage: a new tensor, freed by the
   * `tidy` that formulas run in.
   */
  get(op: string): Tensor {
    const s = this.saved;
    switch (s.kind) {
      case 'released':
        throw new AutogradError(
          op,
          'saved tensors were already released: backward through the graph a second time needs retainGraph: true on the first backward',
        );
      case 'view':
        if (s.base.isFreed) throw new FreedTensorError(op, s.base.name);
        return s.base.view(s.shape, s.offset);
      default:
        if (s.tensor.isFreed) throw new FreedTensorError(op, s.tensor.name);
        return s.tensor;
    }
  }

  release(): void {
    if (this.saved.kind === 'retained') this.saved.tensor.free();
    this.saved = { kind: 'released' };
  }
}

/** A node's lifecycle: recorded by forward, released after its backward (without retainGraph). */
export type NodeState = 'recorded' | 'released';

/**
 * A node of the backward graph. `next[i]` is where the gradient of input i goes (null when input i
 * does not require grad). `preHooks` holds the tensor hooks of each output.
 */
export abstract class GradNode implements GradNodeLike {
  abstract readonly name: string;
  readonly sequenceNr: number;
  state: NodeState = 'recorded';
  readonly preHooks = new Map<number, HookList<TensorHook>>();

  constructor(
    readonly next: readonly (Edge | null)[],
    readonly outputs: readonly TensorMeta[],
    sequenceNr = nextSequenceNr++,
  ) {
    this.sequenceNr = sequenceNr;
  }

  hooksOf(index: number): HookList<TensorHook> {
    let list = this.preHooks.get(index);
    if (list === undefined) {
      list = new HookList<TensorHook>();
      this.preHooks.set(index, list);
    }
    return list;
  }

  /**
   * Gradients of the inputs from the gradients of the outputs (null: none for that input).
   * `backward` is the pass running the node (a node that backpropagates nests in it).
   */
  abstract apply(
    grads: readonly Tensor[],
    backward: RunningBackward,
  ): (Tensor | null)[] | Promise<(Tensor | null)[]>;

  /** Drop saved tensors (after backward without retainGraph). */
  release(): void {
    this.state = 'released';
  }
}

/** What a gradient formula sees. */
export interface GradContext {
  readonly op: string;
  readonly attrs: Readonly<Record<string, unknown>>;
  /** Shape and dtype of each input (null for non-tensor operands). */
  readonly inputs: readonly (TensorMeta | null)[];
  /** Whether input i needs a gradient; formulas skip the others. */
  readonly needsInputGrad: readonly boolean[];
  /** Input i as saved in forward; it must be listed in the formula's `saveInputs`. */
  savedInput(i: number): Tensor;
  /** Output i as saved in forward; it must be listed in the formula's `saveOutputs`. */
  savedOutput(i: number): Tensor;
  /** A tensor attribute as saved in forward; it must be listed in the formula's `saveAttrs`. */
  savedAttr(key: string): Tensor;
}

/** One entry of the gradient table (`gradients.ts`). */
export interface GradientDef {
  /** Inputs the formula reads (by index). */
  readonly saveInputs?: readonly number[];
  /** Outputs the formula reads (by index). */
  readonly saveOutputs?: readonly number[];
  /** Tensor attributes the formula reads (by key); the op may free them after recording. */
  readonly saveAttrs?: readonly string[];
  /**
   * Input gradients (one per input, null/undefined for none) from output gradients (one per output,
   * zeros where an output got no gradient). Must return new tensors or one of `grads` itself, with
   * each input's shape and dtype. Runs under `noGrad`, inside `tidy`.
   */
  backward(ctx: GradContext, grads: readonly Tensor[]): readonly (Tensor | null | undefined)[];
}

/** A node for one recorded op: its gradient formula and saved tensors. */
export class OpNode extends GradNode {
  private readonly savedInputs = new Map<number, SavedTensor>();
  private readonly savedOutputs = new Map<number, SavedTensor>();
  private readonly savedAttrs = new Map<string, SavedTensor>();
  private readonly context: GradContext;

  constructor(
    readonly name: string,
    private readonly def: GradientDef,
    inputs: readonly (Tensor | null)[],
    outputs: readonly Tensor[],
    attrs: Readonly<Record<string, unknown>>,
    next: readonly (Edge | null)[],
  ) {
    super(next, outputs.map(metaOf));
    for (const i of def.saveInputs ?? []) {
      const t = inputs[i];
      if (t) this.savedInputs.set(i, new SavedTensor(t));
    }
    for (const i of def.saveOutputs ?? []) {
      const t = outputs[i];
      if (t) this.savedOutputs.set(i, new SavedTensor(t));
    }
    for (const key of def.saveAttrs ?? []) {
      const t = attrs[key];
      if (!isTensor(t)) {
        throw new AutogradError(name, `attribute '${key}' must be a tensor to be saved`);
      }
      this.savedAttrs.set(key, new SavedTensor(t));
    }
    const held: Tensor[] = [];
    for (const s of this.allSaved()) {
      if (s.retained) held.push(s.retained);
    }
    if (held.length > 0) finalizer.register(this, held, this);
    const op = `${name} backward`;
    const savedInputs = this.savedInputs;
    const savedOutputs = this.savedOutputs;
    const savedAttrs = this.savedAttrs;
    this.context = {
      op: name,
      attrs,
      inputs: inputs.map((t) => (t ? metaOf(t) : null)),
      needsInputGrad: next.map((e) => e !== null),
      savedInput(i) {
        const s = savedInputs.get(i);
        if (!s) throw new AutogradError(op, `input ${i} was not saved (add it to saveInputs)`);
        return s.get(op);
      },
      savedOutput(i) {
        const s = savedOutputs.get(i);
        if (!s) throw new AutogradError(op, `output ${i} was not saved (add it to saveOutputs)`);
        return s.get(op);
      },
      savedAttr(key) {
        const s = savedAttrs.get(key);
        if (!s)
          throw new AutogradError(op, `attribute '${key}' was not saved (add it to saveAttrs)`);
        return s.get(op);
      },
    };
  }

  private allSaved(): SavedTensor[] {
    return [
      ...this.savedInputs.values(),
      ...this.savedOutputs.values(),
      ...this.savedAttrs.values(),
    ];
  }

  apply(grads: readonly Tensor[]): (Tensor | null)[] {
    // A formula computes in the dtypes forward recorded, inside an autocast scope too.
    const result = withAutocastExcluded(() => this.def.backward(this.context, grads));
    return this.next.map((edge, i) => (edge === null ? null : (result[i] ?? null)));
  }

  override release(): void {
    super.release();
    for (const s of this.allSaved()) s.release();
    finalizer.unregister(this);
  }
}

/**
 * The sink of a leaf's gradient: accumulates it into `variable.grad`, then runs the leaf's
 * post-accumulate hooks. One per leaf, cached for the leaf's lifetime, so hooks registered on it
 * apply to every backward. Its sequence number is +Infinity: among ready nodes it runs first, so
 * gradients reach `.grad` (and post-accumulate hooks fire) as early as possible.
 */
export class AccumulateGrad extends GradNode {
  readonly name = 'AccumulateGrad';
  readonly postHooks = new HookList<PostAccumulateGradHook>();

  constructor(readonly variable: Tensor) {
    super([], [metaOf(variable)], Number.POSITIVE_INFINITY);
  }

  apply(): (Tensor | null)[] {
    throw new AutogradError('AccumulateGrad', 'is run by the engine, not applied');
  }
}

/**
 * The virtual node whose inputs are the roots of a backward call (the engine's). It lives here,
 * beside `GradNode`, and not in engine.ts: node.ts imports tensor.ts, which imports engine.ts, so a
 * subclass declared there would run before `GradNode` exists whenever node.ts is imported first.
 */
export class GraphRoot extends GradNode {
  readonly name = 'GraphRoot';
  constructor(
    next: readonly Edge[],
    private readonly grads: Tensor[],
  ) {
    super(next, [], Number.POSITIVE_INFINITY);
  }
  apply(): (Tensor | null)[] {
    return this.grads;
  }
}
