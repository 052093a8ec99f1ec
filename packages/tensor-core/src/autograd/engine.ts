import { ArgumentError, DTypeError, ShapeError } from '../errors.js';
import { keep, tidy } from '../scope.js';
import type { Tensor } from '../tensor.js';
import { emptyTensor, isTensor } from '../tensor-brand.js';
import { AutogradError } from './errors.js';
import { setGradEnabled } from './grad-mode.js';
import type { RemovableHandle } from './hooks.js';
import {
  AccumulateGrad,
  GraphRoot,
  type Edge,
  GradNode,
  OpNode,
  type PostAccumulateGradHook,
  type TensorHook,
  type TensorMeta,
} from './node.js';
import { dependencies, ReadyQueue } from './ready-queue.js';
import { asCurrent, BackwardRun, parentTask, type RunningBackward } from './running-backward.js';

/**
 * [Note: the backward engine and its ordering guarantees]
 * `backward` is define-by-run reverse mode over the nodes that ops recorded. It runs on one logical
 * thread and awaits every hook before it goes on, so hooks may await collectives. The guarantees
 * sharding wrappers rely on:
 * 1. A node runs only after every gradient flowing into it has arrived (dependency counts from a
 *    walk of the graph reachable from the roots). Among ready nodes the one recorded last runs
 *    first (PyTorch's sequence numbers), and a leaf's AccumulateGrad runs before any other ready
 *    node, so gradients land in `.grad` as soon as they are complete.
 * 2. Tensor hooks (`registerHook`) of an output run, in registration order, when that output's
 *    gradient is complete and before the node that produced the output runs (for a leaf: before
 *    accumulation). A hook may return a replacement gradient, which the next hook sees. This is
 *    where FSDP's pre-backward hook rebuilds full parameters: nodes read parameters (saved by
 *    reference) only when they run, after the hook.
 * 3. Post-accumulate hooks (`registerPostAccumulateGradHook`) run right after a leaf's gradient was
 *    added to `.grad`, once per backward per leaf, in the order the leaves' gradients become ready.
 *    A leaf used several times in the graph gets one accumulation of the summed gradient.
 * 4. Callbacks queued with `queueCallback` run once, in FIFO order, after the whole graph of the
 *    outermost backward has run (also those queued from a nested backward, e.g. a checkpoint's
 *    recomputation, and those queued by other callbacks), before `backward` resolves. Hooks, nodes
 *    and callbacks get the running backward to queue on ([Note: the running backward]), so ranks
 *    sharing a thread each queue on their own.
 * 5. Each hook and callback is awaited before the engine continues. A hook that wants its
 *    communication to overlap with the rest of backward (DDP buckets) should start it, keep the
 *    promise, and await it in a queued callback instead of returning it.
 * Gradient formulas run under `noGrad` and inside `tidy`; hooks run with grad mode off while their
 * synchronous part runs. An error from a formula or a hook rejects `backward`.
 *
 * The engine owns the gradient tensors it creates and frees each as soon as nothing needs it; a
 * gradient is stolen into `.grad` when `.grad` is null and nothing else holds its storage, and
 * added in place into an existing `.grad` otherwise (so `.grad` may be a view into a flat buffer).
 * A tensor returned by a tensor hook is taken over by the engine too: return a fresh tensor.
 */

const outputIndices = new WeakMap<Tensor, number>();
const accumulators = new WeakMap<Tensor, AccumulateGrad>();

/** Make `tensor` output `index` of `node` (called when recording). */
export function setGradFn(tensor: Tensor, node: GradNode, index: number): void {
  tensor.gradFn = node;
  tensor.requiresGrad = true;
  if (index !== 0) outputIndices.set(tensor, index);
}

/** The leaf's AccumulateGrad node, created on first use and cached for the leaf's lifetime. */
export function accumulatorOf(leaf: Tensor): AccumulateGrad {
  let node = accumulators.get(leaf);
  if (node === undefined) {
    node = new AccumulateGrad(leaf);
    accumulators.set(leaf, node);
  }
  return node;
}

/** Where the gradient of `tensor` goes, or null when it does not require grad. */
export function gradientEdge(tensor: Tensor): Edge | null {
  if (tensor.gradFn instanceof GradNode) {
    return { node: tensor.gradFn, index: outputIndices.get(tensor) ?? 0 };
  }
  if (tensor.requiresGrad) return { node: accumulatorOf(tensor), index: 0 };
  return null;
}

/**
 * Register a hook on `tensor`'s gradient. It runs when the gradient is complete (for a leaf,
 * before it is accumulated into `.grad`) and may return a replacement. See [Note: the backward
 * engine and its ordering guarantees].
 */
export function registerTensorHook(tensor: Tensor, hook: TensorHook): RemovableHandle {
  const edge = gradientEdge(tensor);
  if (edge === null) {
    throw new ArgumentError(
      'registerHook',
      `cannot register a hook on ${tensor} because it does not require grad`,
    );
  }
  return edge.node.hooksOf(edge.index).add(hook);
}

/** Register a hook that runs after a leaf's gradient has been accumulated into its `.grad`. */
export function registerPostAccumulateGradHook(
  leaf: Tensor,
  hook: PostAccumulateGradHook,
): RemovableHandle {
  if (!leaf.isLeaf || !leaf.requiresGrad) {
    throw new ArgumentError(
      'registerPostAccumulateGradHook',
      `${leaf} must be a leaf that requires grad`,
    );
  }
  return accumulatorOf(leaf).postHooks.add(hook);
}

/**
 * One backward pass: its nesting and callbacks ([Note: the running backward]) and the gradient
 * tensors it owns.
 */
class GraphTask extends BackwardRun {
  private readonly owned = new Map<Tensor, number>();

  constructor(
    readonly retainGraph: boolean,
    parent: BackwardRun | null,
  ) {
    super(parent);
  }

  /** Count one more holder of `t` if the engine owns it. `fresh` tensors become owned. */
  hold(t: Tensor, fresh: boolean): void {
    const n = this.owned.get(t);
    if (n !== undefined) this.owned.set(t, n + 1);
    else if (fresh) this.owned.set(t, 1);
  }

  /** One holder less; the last one frees an owned tensor. */
  drop(t: Tensor): void {
    const n = this.owned.get(t);
    if (n === undefined) return;
    if (n > 1) this.owned.set(t, n - 1);
    else {
      this.owned.delete(t);
      t.free();
    }
  }

  /** Whether the engine owns `t`, holds it once, and `t` alone holds its storage. */
  soleHolder(t: Tensor): boolean {
    return this.owned.get(t) === 1 && t.storage('backward').refCount === 1;
  }

  /** Hand `t` over to the caller if this is its only holder and it alone holds its storage. */
  steal(t: Tensor): boolean {
    if (!this.soleHolder(t)) return false;
    this.owned.delete(t);
    return true;
  }

  /** The end: free what it still owns; an outermost task takes no more callbacks. */
  finish(): void {
    this.end();
    for (const t of this.owned.keys()) t.free();
    this.owned.clear();
  }
}

/** Options of `backward`. */
export interface BackwardOptions {
  /** Keep saved tensors so the graph can be backpropagated again. */
  retainGraph?: boolean;
  /**
   * The backward this one runs inside (the `RunningBackward` a hook or node got): its callbacks
   * then run at the end of that one ([Note: the running backward]). Without it, a backward started
   * inside another is nested only where AsyncLocalStorage tells (Node).
   */
  nestedIn?: RunningBackward;
}

function newLike(meta: TensorMeta): Tensor {
  return keep(emptyTensor(meta.backend, meta.shape, meta.dtype));
}

function zerosLike(meta: TensorMeta): Tensor {
  const t = newLike(meta);
  meta.backend.fill(t.kernel('backward'), 0);
  return t;
}

function sumOf(a: Tensor, b: Tensor): Tensor {
  const out = newLike(a);
  a.backend.binary('add', a.kernel('backward'), b.kernel('backward'), out.kernel('backward'));
  return out;
}

function checkGradient(op: string, what: string, grad: Tensor, meta: TensorMeta): void {
  if (grad.shape.length !== meta.shape.length || grad.shape.some((d, i) => d !== meta.shape[i])) {
    throw new ShapeError(op, [grad.shape, meta.shape], `gradient of ${what} has the wrong shape`);
  }
  if (grad.dtype !== meta.dtype) {
    throw new DTypeError(op, [grad.dtype, meta.dtype], `gradient of ${what} has the wrong dtype`);
  }
}

/** Call a hook with grad mode off during its synchronous part, then await it. */
async function callHook<R>(fn: () => R): Promise<Awaited<R>> {
  const previous = setGradEnabled(false);
  let result: R;
  try {
    result = fn();
  } finally {
    setGradEnabled(previous);
  }
  return await result;
}

/**
 * Backpropagate from `tensors` (PyTorch's `torch.autograd.backward`): accumulate gradients into
 * the `.grad` of every leaf that requires grad and is reachable. `grads` gives the gradient of each
 * root; it may be omitted for a one-element root (ones). Resolves after every hook and queued
 * callback has run. See [Note: the backward engine and its ordering guarantees].
 */
export async function backward(
  tensors: Tensor | readonly Tensor[],
  grads?: Tensor | null | readonly (Tensor | null | undefined)[],
  options: BackwardOptions = {},
): Promise<void> {
  const roots = Array.isArray(tensors) ? (tensors as readonly Tensor[]) : [tensors as Tensor];
  const given: readonly (Tensor | null | undefined)[] =
    grads === undefined || grads === null
      ? []
      : Array.isArray(grads)
        ? (grads as readonly (Tensor | null | undefined)[])
        : [grads as Tensor];
  const task = new GraphTask(options.retainGraph ?? false, parentTask(options.nestedIn));
  const edges: Edge[] = [];
  const rootGrads: Tensor[] = [];
  try {
    roots.forEach((root, i) => {
      const edge = gradientEdge(root);
      if (edge === null) {
        throw new AutogradError(
          'backward',
          `root ${i} (${root}) does not require grad and has no gradFn`,
        );
      }
      let grad = given[i] ?? null;
      if (grad === null) {
        if (root.size !== 1) {
          throw new AutogradError(
            'backward',
            `a gradient is needed for root ${i} of shape [${root.shape.join(', ')}]: only one-element roots get ones`,
          );
        }
        grad = newLike(root);
        root.backend.fill(grad.kernel('backward'), 1);
        task.hold(grad, true);
      } else {
        checkGradient('backward', `root ${i}`, grad, root);
        task.hold(grad, false);
      }
      edges.push(edge);
      rootGrads.push(grad);
    });
  } catch (error) {
    task.finish();
    throw error;
  }
  // A nested backward (a checkpoint's recomputation) queues its callbacks to the outermost one,
  // which runs them.
  try {
    await asCurrent(task, async () => {
      await run(task, new GraphRoot(edges, rootGrads));
      if (task.outermost !== task) return;
      for (let i = 0; i < task.callbacks.length; i++) {
        const callback = task.callbacks[i]!;
        await callHook(() => callback(task));
      }
    });
  } finally {
    task.finish();
  }
}

async function run(task: GraphTask, root: GraphRoot): Promise<void> {
  const deps = dependencies(root);
  const buffers = new Map<GradNode, (Tensor | null)[]>();
  const ready = new ReadyQueue();
  ready.push(root);
  while (ready.size > 0) {
    const node = ready.pop();
    const buffer = buffers.get(node) ?? [];
    buffers.delete(node);
    const inputGrads = await runNode(task, node, buffer);
    node.next.forEach((edge, i) => {
      if (edge === null) return;
      const grad = inputGrads[i] ?? null;
      if (grad !== null) {
        checkGradient(`${node.name} backward`, `input ${i}`, grad, edge.node.outputs[edge.index]!);
        let slots = buffers.get(edge.node);
        if (slots === undefined) {
          slots = [];
          buffers.set(edge.node, slots);
        }
        const existing = slots[edge.index] ?? null;
        if (existing === null) {
          slots[edge.index] = grad;
        } else if (task.soleHolder(existing)) {
          // The slot alone holds the sum so far: add into it (PyTorch's input buffer adds in
          // place too), instead of a new tensor (GPT-2's tied token embedding: a fresh 154 MB).
          const into = existing.kernel('backward');
          existing.backend.binary('add', into, grad.kernel('backward'), into);
          task.drop(grad);
        } else {
          const sum = sumOf(existing, grad);
          task.hold(sum, true);
          task.drop(existing);
          task.drop(grad);
          slots[edge.index] = sum;
        }
      }
      const left = deps.get(edge.node)! - 1;
      deps.set(edge.node, left);
      if (left === 0) ready.push(edge.node);
    });
  }
}

/** Run one ready node: its tensor hooks, then its formula (or accumulation). */
async function runNode(
  task: GraphTask,
  node: GradNode,
  buffer: (Tensor | null)[],
): Promise<(Tensor | null)[]> {
  if (node instanceof GraphRoot) {
    const out = node.apply();
    return out;
  }
  for (const [index, hooks] of node.preHooks) {
    for (const hook of hooks.snapshot()) {
      const grad = buffer[index] ?? null;
      if (grad === null) break;
      const replaced = await callHook(() => hook(grad, task));
      if (isTensor(replaced) && replaced !== grad) {
        checkGradient(`${node.name} hook`, `output ${index}`, replaced, node.outputs[index]!);
        task.hold(replaced, true);
        task.drop(grad);
        buffer[index] = replaced;
      }
    }
  }
  if (node instanceof AccumulateGrad) {
    const grad = buffer[0] ?? null;
    if (grad !== null) await accumulate(task, node, grad);
    return [];
  }
  if (!buffer.some((g) => g != null)) return node.next.map(() => null);
  if (node.state === 'released') {
    for (const g of buffer) if (g) task.drop(g);
    throw new AutogradError(
      `${node.name} backward`,
      'the graph was already released: backward through it a second time needs retainGraph: true on the first backward',
    );
  }
  const grads = node.outputs.map((meta, i) => {
    const g = buffer[i] ?? null;
    if (g !== null) return g;
    const zeros = zerosLike(meta);
    task.hold(zeros, true);
    return zeros;
  });
  let result: (Tensor | null)[];
  try {
    result =
      node instanceof OpNode ? applyFormula(node, grads, task) : await node.apply(grads, task);
  } finally {
    if (!task.retainGraph) node.release();
  }
  for (const r of result) if (r) task.hold(r, !grads.includes(r));
  for (const g of grads) task.drop(g);
  for (const r of result) if (r) keep(r);
  return result;
}

/** Run a node's synchronous formula under noGrad inside tidy (its temporaries are freed). */
export function applyFormula(
  node: GradNode,
  grads: readonly Tensor[],
  backward: RunningBackward,
): (Tensor | null)[] {
  const previous = setGradEnabled(false);
  try {
    return tidy(() => node.apply(grads, backward) as (Tensor | null)[]);
  } finally {
    setGradEnabled(previous);
  }
}

async function accumulate(task: GraphTask, node: AccumulateGrad, grad: Tensor): Promise<void> {
  const leaf = node.variable;
  if (leaf.grad === null) {
    if (task.steal(grad)) {
      leaf.grad = grad;
    } else {
      const copy = newLike(grad);
      grad.backend.copy(grad.kernel('backward'), copy.kernel('backward'));
      leaf.grad = copy;
      task.drop(grad);
    }
  } else {
    checkGradient('AccumulateGrad', leaf.name ?? 'a leaf', leaf.grad, node.outputs[0]!);
    // In place (`grad.add_(g)`), as the contract allows: no sum beside it to copy back.
    const into = leaf.grad.kernel('backward');
    leaf.backend.binary('add', into, grad.kernel('backward'), into);
    task.drop(grad);
  }
  for (const hook of node.postHooks.snapshot()) await callHook(() => hook(leaf, task));
}
