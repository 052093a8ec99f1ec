import type { Tensor } from '../tensor.js';
import { gradientEdge, setGradFn } from './engine.js';
import { AutogradError } from './errors.js';
import { gradients } from './gradients.js';
import { isGradEnabled } from './grad-mode.js';
import { noteView, OpNode } from './node.js';

/**
 * [Note: the autograd seam]
 * Every differentiable op of the ops layer calls `recordOp` once, after computing its output, with
 * its name, its tensor inputs (null for non-tensor operands), its output(s) and the attributes its
 * gradient needs. Autograd (this folder) decides whether to record a node (grad mode on and some
 * input requires grad), what to save, and maps the op name to its gradient in one table
 * (`gradients.ts`). The ops layer knows nothing else about autograd.
 */
export interface OpRecord {
  readonly op: string;
  readonly inputs: readonly (Tensor | null)[];
  readonly outputs: readonly Tensor[];
  readonly attrs: Readonly<Record<string, unknown>>;
}

/**
 * Probes are active while a checkpointed function runs its forward without recording: any op with
 * an input that requires grad marks them, so `checkpoint` knows whether its outputs need a backward
 * node even when only parameters inside the function (not its inputs) require grad.
 */
export interface RequiresGradProbe {
  sawRequiresGrad: boolean;
}

const probes = new Set<RequiresGradProbe>();

/** Start noting whether ops see inputs that require grad; end with `endProbe`. */
export function startProbe(): RequiresGradProbe {
  const probe = { sawRequiresGrad: false };
  probes.add(probe);
  return probe;
}

export function endProbe(probe: RequiresGradProbe): void {
  probes.delete(probe);
}

/** Called by each differentiable op. Records a node when grad mode is on and an input requires grad. */
export function recordOp(
  op: string,
  inputs: readonly (Tensor | null)[],
  outputs: Tensor | readonly Tensor[],
  attrs: Readonly<Record<string, unknown>> = {},
): void {
  const all = Array.isArray(outputs) ? (outputs as readonly Tensor[]) : [outputs as Tensor];
  // Views of parameters are tracked even when nothing here requires grad (a frozen weight): a
  // later recorded op may save them, and must then save them by reference.
  if (isGradEnabled()) {
    for (const out of all) {
      for (const input of inputs) if (input) noteView(out, input);
    }
  }
  let needed = false;
  for (const t of inputs) {
    if (t?.requiresGrad) {
      needed = true;
      break;
    }
  }
  if (!needed) return;
  for (const probe of probes) probe.sawRequiresGrad = true;
  if (!isGradEnabled()) return;
  const def = gradients[op];
  if (def === undefined) {
    throw new AutogradError(op, `no gradient is defined for op '${op}' (add it to gradients.ts)`);
  }
  // Integer outputs carry no gradient (PyTorch: a cast to an integer type does not require grad).
  if (all.every((t) => t.dtype === 'i32')) return;
  const next = inputs.map((t) => (t ? gradientEdge(t) : null));
  const node = new OpNode(op, def, inputs, all, attrs, next);
  all.forEach((t, i) => {
    if (t.dtype !== 'i32') setGradFn(t, node, i);
  });
}
