import { headViews } from '../ops/attention-heads.js';
import { matmulViewsInto, transposeView } from '../ops/matrix-views.js';
import { Tensor } from '../tensor.js';
import type { GradientDef } from './node.js';

/** `scaledMaskedSoftmax`'s gradient dx from its output y and dy (the table's own: gradients.ts). */
type ScaledMaskedSoftmaxGrad = (y: Tensor, dy: Tensor, mask: Tensor, scale: number) => Tensor;

/**
 * The gradient of `attention` (attention's heads in one kernel: [Note: attention's heads in one
 * call] in backend/cpu/attention-kernel.ts): dqkv from the weights att the forward saved, by the
 * backend's `attentionBackward` where it takes the call, else by the ops whose gradients the
 * composite's would run (v's window from att^T g, the scores' gradient through
 * `scaledMaskedSoftmax`'s, `softmaxGrad`, passed in by the table), then q's and k's windows),
 * each window written once into one dqkv, which the three cover. The mask gets none. A function,
 * made when the table is, for the reason `layoutGradients` is one (layout-gradients.ts).
 */
export function attentionGradient(softmaxGrad: ScaledMaskedSoftmaxGrad): GradientDef {
  return {
    saveInputs: [0, 1],
    saveAttrs: ['att'],
    backward(ctx, [g]) {
      const qkv = ctx.savedInput(0);
      const mask = ctx.savedInput(1);
      const att = ctx.savedAttr('att');
      const nHead = ctx.attrs.nHead as number;
      const scale = ctx.attrs.scale as number;
      const dqkv = Tensor.empty(qkv.backend, qkv.shape, qkv.dtype);
      const backward = qkv.backend.attentionBackward;
      const done =
        backward?.call(
          qkv.backend,
          qkv.kernel('attention backward'),
          att.kernel('attention backward'),
          g!.kernel('attention backward'),
          mask.kernel('attention backward'),
          nHead,
          scale,
          dqkv.kernel('attention backward'),
        ) === true;
      if (!done) gradientByOps(qkv, att, g!, mask, nHead, scale, dqkv, softmaxGrad);
      return [dqkv, null];
    },
  };
}

function gradientByOps(
  qkv: Tensor,
  att: Tensor,
  g: Tensor,
  mask: Tensor,
  nHead: number,
  scale: number,
  dqkv: Tensor,
  softmaxGrad: ScaledMaskedSoftmaxGrad,
): void {
  const [b, t, c3] = qkv.shape as [number, number, number];
  const { head, square, merged } = headViews(b, t, c3 / 3, nHead);
  matmulViewsInto(att, transposeView(square), g, merged, dqkv, head(2), false);
  const dAtt = Tensor.empty(qkv.backend, square.shape, qkv.dtype);
  matmulViewsInto(g, merged, qkv, transposeView(head(2)), dAtt, square, false);
  const dScores = softmaxGrad(att, dAtt, mask, scale);
  matmulViewsInto(dScores, square, qkv, head(1), dqkv, head(0), false);
  matmulViewsInto(dScores, transposeView(square), qkv, head(0), dqkv, head(1), false);
}
