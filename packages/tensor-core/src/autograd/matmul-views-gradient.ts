import { type MatrixView, matmulViewsInto, transposeView } from '../ops/matrix-views.js';
import { Tensor } from '../tensor.js';
import type { GradientDef } from './node.js';

/**
 * The gradient of `matmulViews` ([Note: matmul over strided views]): with G out's gradient read
 * through out's window, dA = G B^T into a's window and dB = A^T G into b's, each accumulated into
 * zeros of its input's shape (so a window that repeats a matrix sums its gradients). When a and b
 * are one tensor (q and k of one qkv), both land in one gradient.
 */
export const matmulViewsGradient: GradientDef = {
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
    const zerosLike = (t: Tensor) => {
      const z = Tensor.empty(t.backend, t.shape, t.dtype);
      t.backend.fill(z.kernel('matmulViews backward'), 0);
      return z;
    };
    const da = needA ? zerosLike(a) : null;
    const db = same ? da : needB ? zerosLike(b) : null;
    if (da !== null) matmulViewsInto(g!, outView, b, transposeView(bView), da, aView, true);
    if (db !== null) matmulViewsInto(a, transposeView(aView), g!, outView, db, bView, true);
    return same ? [da, null] : [da, db];
  },
};
