import type { KernelTensor } from '../backend/backend.js';
import { Tensor } from '../tensor.js';

/**
 * [Note: softmax's gradient in one pass]
 * Softmax's gradient over the last axis is dx = y (dy - sum(dy y)), y softmax's output. As ops it
 * is four kernels and three temporaries the size of y (the products, the difference, dx), each
 * op a pass over memory (and on the CPU backend a copy into and out of the WASM kernels' memory):
 * on the default GPT's attention weights ([16, 4, 32, 32] a layer) some 0.5 ms of each layer's
 * backward, and at GPT-2's [4, 12, 256, 256] twelve passes over 12 MB. A backend with
 * `softmaxBackward` (the CPU's, in f32 and f64) computes it in one kernel, a row at a time, with
 * the roundings of those ops: each product dy y rounded to the dtype as `mul` stores it, the row's
 * sum in f64 in column order and rounded as `sum` along the last axis gives it, dy - dot rounded
 * as `sub`, then times y rounded as `mul`. So the bits are the ops' bits, on every path of the
 * CPU backend (the WASM kernel and the TypeScript one agree: f64 holds an f32 sum or difference
 * exactly enough that rounding it once more to f32 is the f32 operation's rounding). Backends
 * without it (WebGPU), dtypes it declines (f16 and bf16, whose ops round at every step) and
 * operands of different shapes or dtypes take the ops (gradients.ts's `softmaxGrad`). Not
 * recorded, as `activationGrad`: double backward through softmax is not supported. These take no
 * ops, so the gradient table's cycle with the ops layer gains no file.
 */
/**
 * dx of y's shape and dtype by `kernel` (the backend's call, or undefined where it has none), when
 * dy matches y; null where it cannot run or declines (nothing kept).
 */
function byKernel(
  y: Tensor,
  dy: Tensor,
  op: string,
  kernel: ((dx: KernelTensor) => boolean) | undefined,
): Tensor | null {
  const matches =
    dy.backend === y.backend &&
    dy.dtype === y.dtype &&
    dy.shape.length === y.shape.length &&
    dy.shape.every((d, i) => d === y.shape[i]);
  if (kernel === undefined || y.size === 0 || !matches) return null;
  const dx = Tensor.empty(y.backend, y.shape, y.dtype);
  if (kernel(dx.kernel(op))) return dx;
  dx.free();
  return null;
}

/** dx = y (dy - sum(dy y)) by the backend's `softmaxBackward`, or null where it has none or declines. */
export function softmaxGradByKernel(y: Tensor, dy: Tensor): Tensor | null {
  const backend = y.backend;
  const op = 'softmax backward';
  const run =
    backend.softmaxBackward &&
    ((dx: KernelTensor) => backend.softmaxBackward!(y.kernel(op), dy.kernel(op), dx));
  return byKernel(y, dy, op, run);
}

/**
 * `scaledMaskedSoftmax`'s gradient from its output y, dx = where(mask, 0, y (dy - sum(dy y))) *
 * scale, by the backend's `scaledMaskedSoftmaxBackward` ([Note: attention's softmax in one call]),
 * or null where it has none or declines.
 */
export function scaledMaskedSoftmaxGradByKernel(
  y: Tensor,
  dy: Tensor,
  mask: Tensor,
  scale: number,
): Tensor | null {
  const backend = y.backend;
  const op = 'scaledMaskedSoftmax backward';
  const k = (t: Tensor) => t.kernel(op);
  const run =
    backend.scaledMaskedSoftmaxBackward &&
    ((dx: KernelTensor) => backend.scaledMaskedSoftmaxBackward!(k(y), k(dy), k(mask), scale, dx));
  return byKernel(y, dy, op, run);
}
