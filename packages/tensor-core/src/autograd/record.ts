import type { Tensor } from '../tensor.js';

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

/** Called by each differentiable op. Replaced by the autograd engine's recorder. */
export function recordOp(
  _op: string,
  _inputs: readonly (Tensor | null)[],
  _outputs: Tensor | readonly Tensor[],
  _attrs: Readonly<Record<string, unknown>> = {},
): void {}
