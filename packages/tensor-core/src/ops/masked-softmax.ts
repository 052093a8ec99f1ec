import { recordOp } from '../autograd/record.js';
import { activeAutocastScope } from '../autocast-state.js';
import { ShapeError } from '../errors.js';
import { Tensor } from '../tensor.js';
import { maskedFill, mul } from './elementwise.js';
import { softmax } from './nn.js';
import { backendOf, broadcastShapes, requireFloat, sameShape } from './validate.js';

/**
 * [Note: attention's softmax in one call]
 * Attention's weights are softmax(maskedFill(scores * scale, mask, -inf)) over the last axis, and
 * as ops that is three kernels forward (`mul` by the number, `where`, `softmax`) and, with
 * softmax's own, three backward (`where` for the mask, `mul` by the number): six passes over the
 * [B, nh, T, T] weights a layer (12 MB each at GPT-2's B4 T256), and on the CPU backend a copy
 * into and out of the WASM kernels' memory around each. `scaledMaskedSoftmax` is one primitive
 * with one kernel each way on a backend that has them (`scaledMaskedSoftmax` and its backward in
 * the kernel contract: the CPU's runs the same kernels in a row inside the WASM memory, copying
 * in once and out once, or its own kernels in place on the output), so the bits are those of the
 * ops; elsewhere (WebGPU), under autocast, and for a mask that does not broadcast to x, it runs
 * the ops themselves, recorded as before. Its gradient, from the output y: where(mask, 0,
 * y (dy - sum(dy y))) * scale, the same bits again ([Note: softmax's gradient in one pass]).
 * PyTorch fuses the mask into the softmax in `torch._masked_softmax` (`nn.MultiheadAttention`'s
 * fast path), and Megatron-LM the scale, the mask and the softmax, both ways, in
 * `FusedScaleMaskSoftmax`.
 */
export function scaledMaskedSoftmax(x: Tensor, mask: Tensor, scale: number): Tensor {
  const backend = backendOf('scaledMaskedSoftmax', [x, mask]);
  requireFloat('scaledMaskedSoftmax', x);
  if (x.rank === 0) {
    throw new ShapeError('scaledMaskedSoftmax', [x.shape], 'needs at least one dimension');
  }
  const broadcast = broadcastShapes('scaledMaskedSoftmax', [x.shape, mask.shape]);
  if (
    backend.scaledMaskedSoftmax !== undefined &&
    activeAutocastScope() === null &&
    sameShape(broadcast, x.shape) &&
    x.size > 0
  ) {
    const out = Tensor.empty(backend, x.shape, x.dtype);
    const op = 'scaledMaskedSoftmax';
    if (
      backend.scaledMaskedSoftmax(x.kernel(op), mask.kernel(op), scale, out.kernel(op)) !== false
    ) {
      recordOp(op, [x, mask], out, { scale });
      return out;
    }
    out.free();
  }
  const scaled = mul(x, scale);
  try {
    const filled = maskedFill(scaled, mask, Number.NEGATIVE_INFINITY);
    try {
      return softmax(filled, -1);
    } finally {
      filled.free();
    }
  } finally {
    scaled.free();
  }
}
