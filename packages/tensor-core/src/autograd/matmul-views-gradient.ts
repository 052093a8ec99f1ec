import { distinct, type MatrixView, matmulViewsInto, transposeView } from '../ops/matrix-views.js';
import { shapeSize, Tensor } from '../tensor.js';
import type { GradientDef } from './node.js';

/**
 * The gradient of `matmulViews` ([Note: matmul over strided views]): with G out's gradient read
 * through out's window, dA = G B^T into a's window and dB = A^T G into b's, each accumulated into
 * zeros of its input's shape (so a window that repeats a matrix sums its gradients). When a and b
 * are one tensor (q and k of one qkv), both land in one gradient. A function, made when the table
 * is, for the reason `layoutGradients` is one (layout-gradients.ts).
 */
export function matmulViewsGradient(): GradientDef {
  return {
    saveInputs: [0, 1],
    backward(ctx, [g]) {
      const { aView, bView, outView, same } = ctx.attrs as {
        aView: MatrixView;
        bView: MatrixView;
        outView: MatrixView;
        same: boolean;
      };
      const needA = ctx.needsInputGrad[0] === true;
      const needB = same ? needA : ctx.needsInputGrad[1] === true;
      const a = ctx.savedInput(0);
      const b: Tensor = same ? a : ctx.savedInput(1);
      // Where a window is every element of its input once, the product fills the gradient: no
      // zeros. Else zeros under it, and products added where the window repeats a matrix (which
      // then sums its gradients).
      const covers = (t: Tensor, view: MatrixView) =>
        shapeSize(view.shape) === t.size && distinct(view);
      const gradientFor = (t: Tensor, view: MatrixView): [Tensor, boolean] => {
        const grad = Tensor.empty(t.backend, t.shape, t.dtype);
        if (covers(t, view)) return [grad, false];
        t.backend.fill(grad.kernel('matmulViews backward'), 0);
        return [grad, !distinct(view)];
      };
      let da: Tensor | null = null;
      let db: Tensor | null = null;
      if (needA) {
        const [grad, accumulate] = gradientFor(a, aView);
        matmulViewsInto(g!, outView, b, transposeView(bView), grad, aView, accumulate);
        da = grad;
      }
      if (needB && same) {
        // Into a's gradient beside dA: added, in case the two windows share elements.
        matmulViewsInto(a, transposeView(aView), g!, outView, da!, bView, true);
      } else if (needB) {
        const [grad, accumulate] = gradientFor(b, bView);
        matmulViewsInto(a, transposeView(aView), g!, outView, grad, bView, accumulate);
        db = grad;
      }
      return same ? [da, null] : [da, db];
    },
  };
}
