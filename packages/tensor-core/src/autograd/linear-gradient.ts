import { batchedMatmul, reshape } from '../ops/index.js';
import type { Tensor } from '../tensor.js';
import { foldedWeightGrad, foldsWeightGrad } from './folded-weight-grad.js';
import { reduceTo } from './layout-gradients.js';
import type { GradientDef } from './node.js';

/**
 * The gradient of `linear` (out = x weight^T + bias in one kernel: [Note: the bias in the gemm] in
 * backend/cpu/matmul.ts): the gradients the `matmul` and `add` it replaces would give, by the same
 * ops on the same operands, so the same bits. x is taken as `matmul` takes it, [B, M, K] (its
 * leading dims folded into B, or B = 1 for a matrix, B = M = 1 for a vector), the weight as
 * [1, N, K] transposed: dx = g W, dW = g^T x (folded over B: [Note: folded weight gradient]), and
 * the bias's gradient g summed over every leading dim by the broadcast add's own `reduceTo`. A
 * function, made when the table is, for the reason `layoutGradients` is one (layout-gradients.ts).
 */
export function linearGradient(): GradientDef {
  return {
    // Inputs in addmm's order, [bias, x, weight]: see `linear` in ops/linalg.ts.
    saveInputs: [1, 2],
    backward(ctx, [g]) {
      const xShape = ctx.inputs[1]!.shape;
      const [n, k] = ctx.inputs[2]!.shape as [number, number];
      const m = xShape.length >= 2 ? xShape[xShape.length - 2]! : 1;
      const batch = xShape.length >= 3 ? xShape.slice(0, -2).reduce((p, d) => p * d, 1) : 1;
      const g3 = reshape(g!, [batch, m, n]);
      let dx: Tensor | null = null;
      if (ctx.needsInputGrad[1]) {
        const w3 = reshape(ctx.savedInput(2), [1, n, k]);
        dx = reshape(batchedMatmul(g3, w3), xShape);
      }
      let dWeight: Tensor | null = null;
      if (ctx.needsInputGrad[2]) {
        const x3 = reshape(ctx.savedInput(1), [batch, m, k]);
        const dw = foldsWeightGrad(x3, [1, n, k], false)
          ? foldedWeightGrad(x3, g3, true)
          : batchedMatmul(g3, x3, { transposeA: true });
        dWeight = reshape(dw, [n, k]);
      }
      const dBias = ctx.needsInputGrad[0] ? reduceTo(g!, [n]) : null;
      return [dBias, dx, dWeight];
    },
  };
}
