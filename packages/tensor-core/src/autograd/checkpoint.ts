import {
  type AutocastSettings,
  currentAutocastSettings,
  runInAutocastScope,
} from '../autocast-state.js';
import { Tensor } from '../tensor.js';
import { keep } from '../scope.js';
import { getDefaultGenerator, type RandomGenerator } from '../random/generator.js';
import { backward, gradientEdge as gradientEdgeOf, setGradFn } from './engine.js';
import { enableGrad, isGradEnabled, noGrad } from './grad-mode.js';
import { metaOf, GradNode, SavedTensor } from './node.js';
import type { RunningBackward } from './running-backward.js';
import { endProbe, startProbe } from './record.js';

/** What a checkpointed function returns: a tensor or tensors, or a promise of them. */
export type CheckpointResult = Tensor | readonly Tensor[];

/** Options of `checkpointWith`. */
export interface CheckpointOptions {
  /**
   * Random streams whose position is saved at forward and restored for the recomputation, besides
   * the default generator (a Dropout with its own generator inside the function). When the
   * function is a module, the generators of the Dropout modules inside it are found by itself.
   */
  generators?: readonly RandomGenerator[];
}

/** Something with a `call` (a Module), checkpointed as a function of its arguments. */
interface Callable {
  call(...args: Tensor[]): unknown;
  modules?(): readonly unknown[];
}

type AnyResult = CheckpointResult | Promise<CheckpointResult>;
type Fn = (...inputs: Tensor[]) => AnyResult;

function isThenable(v: unknown): v is Promise<unknown> {
  return v instanceof Promise;
}

function asList(result: CheckpointResult): readonly Tensor[] {
  return result instanceof Tensor ? [result] : result;
}

function generatorsOf(target: Fn | Callable, extra: readonly RandomGenerator[]): RandomGenerator[] {
  const found = new Set<RandomGenerator>([getDefaultGenerator(), ...extra]);
  if (typeof target !== 'function' && target.modules) {
    for (const m of target.modules()) {
      const g = (m as { generator?: unknown }).generator;
      if (g !== undefined && g !== null && typeof (g as RandomGenerator).getState === 'function') {
        found.add(g as RandomGenerator);
      }
    }
  }
  return [...found];
}

/**
 * The backward node of a checkpointed region: recomputes the region with grad on and backpropagates
 * through the recomputation (a nested backward), returning the gradients of the region's inputs.
 */
class CheckpointNode extends GradNode {
  readonly name = 'checkpoint';
  private readonly saved: SavedTensor[];

  constructor(
    private readonly run: Fn,
    inputs: readonly Tensor[],
    outputs: readonly Tensor[],
    private readonly generators: readonly RandomGenerator[],
    private readonly states: readonly { seed: number; offset: number }[],
    private readonly autocastSettings: AutocastSettings | null,
    next: GradNode['next'],
  ) {
    super(next, outputs.map(metaOf));
    this.saved = inputs.map((t) => new SavedTensor(t));
  }

  async apply(grads: readonly Tensor[], running: RunningBackward): Promise<(Tensor | null)[]> {
    const sources = this.saved.map((s) => s.get('checkpoint backward'));
    const detached = sources.map((x, i) => {
      const d = keep(x.detach());
      d.name = x.name;
      d.requiresGrad = this.next[i] !== null;
      return d;
    });
    const current = this.generators.map((g) => g.getState());
    this.generators.forEach((g, i) => {
      g.setState(this.states[i]!);
    });
    let recomputed: readonly Tensor[] = [];
    try {
      // The recomputation runs in the forward's autocast settings (PyTorch's checkpoint does too),
      // in a scope of its own: its casts are freed when it ends.
      const settings = this.autocastSettings;
      const rerun = (): AnyResult => enableGrad(() => this.run(...detached));
      const out = settings === null ? rerun() : runInAutocastScope(settings, rerun);
      recomputed = asList(isThenable(out) ? await enableGrad(() => out) : out);
      const roots: Tensor[] = [];
      const rootGrads: Tensor[] = [];
      recomputed.forEach((t, i) => {
        if (t.requiresGrad && grads[i] !== undefined) {
          roots.push(t);
          rootGrads.push(grads[i]!);
        }
      });
      if (roots.length > 0) await backward(roots, rootGrads, { nestedIn: running });
      return detached.map((d, i) => {
        if (this.next[i] === null) return null;
        const g = d.grad;
        d.grad = null;
        return g;
      });
    } finally {
      this.generators.forEach((g, i) => {
        g.setState(current[i]!);
      });
      for (const d of detached) {
        d.grad?.free();
        d.free();
      }
      for (const t of recomputed) t.free();
    }
  }

  override release(): void {
    super.release();
    for (const s of this.saved) s.release();
  }
}

/**
 * [Note: activation checkpointing]
 * `checkpoint(fn, ...inputs)` runs `fn` under `noGrad`, so none of its activations are saved, and
 * records one node whose backward recomputes `fn` with grad on and backpropagates through the
 * recomputation (PyTorch's reentrant `torch.utils.checkpoint`). Before recomputing it restores the
 * position (offset) of the default generator, of `options.generators` and of the generators of
 * Dropout modules inside a module argument, so dropout masks match the forward; afterwards it puts
 * the streams back where they were. Parameters used inside `fn` get their gradients from the
 * nested backward, with their hooks firing there (tensor hooks, post-accumulate hooks); callbacks
 * queued there run at the end of the outer backward. Module forward hooks run again during the
 * recomputation, which is what a sharded wrapper needs to rebuild its parameters. A node is recorded
 * when an input requires grad or an op inside `fn` saw a parameter that does (probed during the
 * no-grad forward). `fn` may be async (a module with async hooks); `checkpoint` then returns a
 * promise.
 */
export function checkpoint<R extends AnyResult>(
  fn: (...inputs: Tensor[]) => R,
  ...inputs: Tensor[]
): R;
export function checkpoint<R extends AnyResult>(
  module: { call(...args: Tensor[]): R },
  ...inputs: Tensor[]
): R;
export function checkpoint(fn: Fn | Callable, ...inputs: Tensor[]): AnyResult {
  return checkpointWith({}, fn as Fn, ...inputs);
}

/** `checkpoint` with options (extra generators to restore). */
export function checkpointWith<R extends AnyResult>(
  options: CheckpointOptions,
  fn: (...inputs: Tensor[]) => R,
  ...inputs: Tensor[]
): R;
export function checkpointWith<R extends AnyResult>(
  options: CheckpointOptions,
  module: { call(...args: Tensor[]): R },
  ...inputs: Tensor[]
): R;
export function checkpointWith(
  options: CheckpointOptions,
  fn: Fn | Callable,
  ...inputs: Tensor[]
): CheckpointResult | Promise<CheckpointResult> {
  const run: Fn = typeof fn === 'function' ? fn : (...args) => fn.call(...args) as CheckpointResult;
  const generators = generatorsOf(fn, options.generators ?? []);
  const states = generators.map((g) => g.getState());
  const autocastSettings = currentAutocastSettings();
  const recording = isGradEnabled();
  const probe = startProbe();
  const finish = (result: CheckpointResult): CheckpointResult => {
    endProbe(probe);
    const outputs = asList(result);
    const needed = probe.sawRequiresGrad || inputs.some((t) => t.requiresGrad);
    if (!recording || !needed) return result;
    const next = inputs.map((t) => (t.requiresGrad ? gradientEdgeOf(t) : null));
    const node = new CheckpointNode(
      run,
      inputs,
      outputs,
      generators,
      states,
      autocastSettings,
      next,
    );
    outputs.forEach((t, i) => {
      if (t.dtype !== 'i32') setGradFn(t, node, i);
    });
    return result;
  };
  let out: CheckpointResult | Promise<CheckpointResult>;
  try {
    out = noGrad(() => run(...inputs));
  } catch (error) {
    endProbe(probe);
    throw error;
  }
  if (isThenable(out)) {
    return out.then(finish, (error: unknown) => {
      endProbe(probe);
      throw error;
    });
  }
  return finish(out);
}
