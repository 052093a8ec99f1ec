/**
 * [Note: the recorded primitives]
 *
 * The public ops are functional and PyTorch-shaped. Each one validates, allocates its outputs,
 * calls kernels and, if differentiable, calls `recordOp(name, inputs, outputs, attrs)` exactly
 * once per primitive it runs. Composites (sub, mean, mseLoss, transpose, matmul's 1-D/batch
 * handling, crossEntropy's reductions, ...) call primitives and record nothing themselves, so
 * autograd needs one gradient per row of this table and nothing else.
 *
 * Inputs are in order; `null` marks a number operand (its value is in attrs). Every output is
 * one tensor unless stated. All tensors are contiguous; "x.shape" below is the input's shape.
 *
 * | primitive    | inputs                          | attrs                                                   | forward |
 * | ------------ | ------------------------------- | ------------------------------------------------------- | ------- |
 * | neg, abs, exp, log, sqrt, rsqrt, tanh, sigmoid, relu, square, reciprocal | [x] | {} | elementwise, out.shape = x.shape |
 * | gelu         | [x]                             | { approximate: 'none' \| 'tanh' }                        | kernels `gelu` / `geluTanh`; backward kernels `geluGrad` / `geluTanhGrad` via `activationGrad` |
 * | add, mul, div, pow, maximum, minimum | [a \| null, b \| null] | { a?: number, b?: number } (the number operand)  | broadcasting; out.shape = broadcast(a, b); reduce a gradient to its input's shape with `sum` over broadcast dims |
 * | where        | [cond, a \| null, b \| null]    | { a?: number, b?: number }                              | cond != 0 ? a : b, broadcasting all three; cond gets no gradient |
 * | sum          | [x]                             | { axes: number[] (sorted, >= 0), keepDim, inputShape }  | |
 * | max, min     | [x]                             | { axes, keepDim, inputShape }                           | NaN propagates; gradient goes to the elements equal to the result (split evenly on ties, as PyTorch's amax) |
 * | softmax      | [x]                             | {}                                                      | over the LAST axis (other axes are transposes around it) |
 * | logSoftmax   | [x]                             | {}                                                      | over the LAST axis |
 * | scaledMaskedSoftmax | [x, mask]                | { scale }                                               | softmax(maskedFill(x * scale, mask, -inf)) over the LAST axis in one kernel where the backend has it, else those ops (recorded as themselves); mask broadcasts to x and gets no gradient ([Note: attention's softmax in one call]); in `masked-softmax.ts`, exported by the package but not from this file, which the gradient table imports |
 * | layerNorm    | [x, weight \| null, bias \| null] | { eps, mean: Tensor [rows], rstd: Tensor [rows] }     | last axis; mean/rstd are f32 (f64 for f64 x) and are FREED by the op after recordOp returns: retain their storage (e.g. `.detach()`) inside recordOp to keep them; backward is the `layerNormBackward` kernel |
 * | matmul       | [a, b], both rank 3             | { transposeA, transposeB }                              | a [Ba, M, K] ([Ba, K, M] if transposeA), b [Bb, K, N] ([Bb, N, K] if transposeB), out [B, M, N]; Ba, Bb are B or 1 (a size-1 batch's gradient is summed over the batch) |
 * | linear       | [bias, x, weight] (addmm's order) | {}                                                    | x [..., K], weight [N, K], bias [N], out [..., N] = x weight^T + bias, recorded only where the backend's `linear` kernel ran ([Note: the bias in the gemm]), else `linear` is the composite of matmul and add; gradient: those two ops' gradients by the same ops |
 * | attention    | [qkv, mask]                      | { att (saved), nHead, scale }                           | qkv [B, T, 3C], mask [T, T]: y [B, T, C] = softmax(maskedFill(q k^T * scale, mask, -inf)) v over nHead heads, recorded only where the backend's `attention` kernel ran ([Note: attention's heads in one call]), else `attendHeads` runs `matmulViews` and `scaledMaskedSoftmax`; gradient: the backend's `attentionBackward`, else those ops' gradients written into one dqkv; in `attention-heads.ts`, outside this file |
 * | matmulViews  | [a, b \| null] (null: b is a)     | { aView, bView, outView, same }                         | windows of a and b (offset, [...batch, rows, cols], strides) multiplied into a window of a new contiguous out ([Note: matmul over strided views]); gradient: the transposed products accumulated into zeros through the same windows |
 * | embedding    | [weight, indices]               | {}                                                      | weight [V, ...], indices i32 any shape, out [...indices.shape, ...weight.shape[1:]]; dWeight = `scatterAdd(dy, indices, V)` (flatten indices) |
 * | indexAdd     | [x, indices, src]               | {}                                                      | out = x with src rows added at indices (axis 0); dx = dy, dsrc = `embedding(dy, indices)` |
 * | crossEntropy | [logits, targets]               | { ignoreIndex }                                         | per-row losses [N] (f32, f64 for f64 logits); backward is the `crossEntropyBackward` kernel |
 * | reshape      | [x]                             | { shape: x.shape }                                      | a view (shares storage); gradient: reshape dy to attrs.shape |
 * | permute      | [x]                             | { dims: number[] (normalized) }                         | out.shape[i] = x.shape[dims[i]]; gradient: permute by the inverse |
 * | slice        | [x]                             | { starts, ends, steps, inputShape } (full rank, normalized) | gradient: zeros(inputShape) with dy copied into the strided window |
 * | concat       | [t0, t1, ...]                   | { axis (normalized), sizes: number[] }                  | gradient: `split(dy, sizes, axis)` |
 * | expand       | [x]                             | { inputShape }                                          | copy with broadcast; gradient: `sum` over new leading and expanded dims, reshaped to inputShape |
 * | cast         | [x]                             | { from: DType } (x.dtype)                               | also clone (same dtype); gradient: cast dy back to `from` (none into i32) |
 *
 * Not recorded (no gradient): comparisons (eq, ne, lt, le, gt, ge), argmax, creation and random
 * ops, in-place ops (copy_, fill_, axpy_, adamStep, sgdStep, checkFinite), activationGrad.
 *
 * Composites free their intermediates with `tensor.free()` as soon as they are done (as `tidy`
 * would), so autograd must save data by retaining storage, never by holding a Tensor object.
 */
export { cast, clone, copy_, fill_, toDType } from './cast.js';
export {
  arange,
  empty,
  full,
  fullLike,
  ones,
  onesLike,
  rand,
  randn,
  tensor,
  zeros,
  zerosLike,
} from './creation.js';
export type { CreateOptions, NestedNumbers, RandomOptions } from './creation.js';
export {
  abs,
  activationGrad,
  add,
  div,
  eq,
  exp,
  ge,
  gelu,
  gt,
  le,
  log,
  lt,
  maskedFill,
  maximum,
  minimum,
  mul,
  ne,
  neg,
  pow,
  reciprocal,
  relu,
  rsqrt,
  sigmoid,
  sqrt,
  square,
  sub,
  tanh,
  where,
} from './elementwise.js';
export type { Operand } from './elementwise.js';
export { createFull } from './fill.js';
export { batchedMatmul, linear, matmul } from './linalg.js';
export type { MatmulOptions } from './linalg.js';
export {
  crossEntropy,
  embedding,
  indexAdd,
  layerNorm,
  logSoftmax,
  mseLoss,
  scatterAdd,
  softmax,
} from './nn.js';
export type { CrossEntropyOptions, LayerNormOptions } from './nn.js';
export { adamStep, axpy_, checkFinite, sgdStep } from './optim.js';
export { argmax, max, mean, min, sum } from './reduce.js';
export type { Axes, ReduceOptions } from './reduce.js';
export {
  broadcastTo,
  chunk,
  concat,
  expand,
  flatten,
  narrow,
  permute,
  reshape,
  slice,
  split,
  squeeze,
  transpose,
  unsqueeze,
  view,
} from './shape.js';
export type { SliceRange } from './shape.js';
