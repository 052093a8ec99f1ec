import { recordOp } from '../autograd/record.js';
import { Tensor } from '../tensor.js';
import type { MatrixView } from './matrix-views.js';
import { backendOf } from './validate.js';

/**
 * The windows of qkv [B, T, 3C] that attention reads (`head(0)` q, `head(1)` k, `head(2)` v:
 * [B, nh, T, hs] each, no copy), its square [B, nh, T, T] of scores, and y's heads in [B, T, C]'s
 * layout ([Note: matmul over strided views] in matmul-views.ts).
 */
export function headViews(
  b: number,
  t: number,
  c: number,
  nHead: number,
): { head: (part: number) => MatrixView; square: MatrixView; merged: MatrixView } {
  const hs = c / nHead;
  const c3 = 3 * c;
  return {
    head: (part) => ({ offset: part * c, shape: [b, nHead, t, hs], strides: [t * c3, hs, c3, 1] }),
    square: { offset: 0, shape: [b, nHead, t, t], strides: [nHead * t * t, t * t, t, 1] },
    merged: { offset: 0, shape: [b, nHead, t, hs], strides: [t * c, hs, c, 1] },
  };
}

/**
 * Causal attention over the heads of qkv [B, T, 3C] in one backend kernel, y [B, T, C] =
 * softmax(maskedFill(q k^T * scale, mask, -inf)) v merged, where the backend has the kernel and
 * takes the call ([Note: attention's heads in one call] in backend/cpu/attention-kernel.ts),
 * recorded as the `attention` primitive with its weights saved for the gradient; null, nothing
 * recorded, where it declines (`attendHeads` then runs the strided matmuls and the softmax,
 * whose bits the kernel has). The mask [T, T] is 1 where a key is hidden from a query.
 */
export function attentionInOneKernel(
  qkv: Tensor,
  nHead: number,
  mask: Tensor,
  scale: number,
): Tensor | null {
  const backend = backendOf('attention', [qkv, mask]);
  if (backend.attention === undefined || qkv.rank !== 3) return null;
  const [b, t, c3] = qkv.shape as [number, number, number];
  const y = Tensor.empty(backend, [b, t, c3 / 3], qkv.dtype);
  const att = Tensor.empty(backend, [b, nHead, t, t], qkv.dtype);
  const done =
    y.size > 0 &&
    backend.attention(
      qkv.kernel('attention'),
      mask.kernel('attention'),
      nHead,
      scale,
      y.kernel('attention'),
      att.kernel('attention'),
    );
  if (!done) {
    y.free();
    att.free();
    return null;
  }
  recordOp('attention', [qkv, mask], y, { att, nHead, scale });
  // The gradient's node holds att where it was recorded; nothing else does.
  att.free();
  return y;
}
