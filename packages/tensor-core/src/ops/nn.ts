import { recordOp } from '../autograd/record.js';
import { ArgumentError, ShapeError } from '../errors.js';
import { Tensor } from '../tensor.js';
import { autocastOp } from './autocast-policy.js';
import { cast } from './cast.js';
import { createFull } from './fill.js';
import { div, ne, square, sub } from './elementwise.js';
import { mean, sum } from './reduce.js';
import { transpose } from './shape.js';
import {
  backendOf,
  kernelAs,
  normalizeAxis,
  requireDType,
  requireFloat,
  requireSameDType,
  runKernel,
  sameShape,
} from './validate.js';

function softmaxImpl(name: 'softmax' | 'logSoftmax', x: Tensor, axis: number): Tensor {
  backendOf(name, [x]);
  requireFloat(name, x);
  if (x.rank === 0) throw new ShapeError(name, [x.shape], 'needs at least one dimension');
  const a = normalizeAxis(name, axis, x.shape);
  if (a !== x.rank - 1) {
    const moved = transpose(x, a, -1);
    try {
      const inner = softmaxImpl(name, moved, -1);
      try {
        return transpose(inner, a, -1);
      } finally {
        inner.free();
      }
    } finally {
      moved.free();
    }
  }
  const out = Tensor.empty(x.backend, x.shape, x.dtype);
  if (out.size > 0) x.backend.softmax(x.kernel(name), out.kernel(name), name === 'logSoftmax');
  recordOp(name, [x], out, {});
  return out;
}

/**
 * Softmax along `axis` (the last by default). Primitive `softmax` over the last axis; another
 * axis is moved last and back with transposes.
 */
export function softmax(x: Tensor, axis = -1): Tensor {
  return autocastOp('softmax', [x], ([cx]) => softmaxImpl('softmax', cx, axis));
}

/** Log-softmax along `axis` (the last by default). Primitive `logSoftmax` over the last axis. */
export function logSoftmax(x: Tensor, axis = -1): Tensor {
  return autocastOp('logSoftmax', [x], ([cx]) => softmaxImpl('logSoftmax', cx, axis));
}

/** Options of `layerNorm`. */
export interface LayerNormOptions {
  /** Scale, [cols] (the last dim of x). */
  weight?: Tensor | null;
  /** Shift, [cols]. */
  bias?: Tensor | null;
  /** Added to the variance. Default 1e-5. */
  eps?: number;
}

/**
 * Layer normalization over the last axis: (x - mean) / sqrt(var + eps) * weight + bias, with the
 * biased variance (PyTorch). Primitive `layerNorm`: attrs carry the per-row `mean` and `rstd`
 * (f32, or f64 for f64 input) the backward kernel needs; the op frees them after `recordOp`.
 */
export function layerNorm(x: Tensor, options: LayerNormOptions = {}): Tensor {
  const params = [x, options.weight ?? null, options.bias ?? null] as const;
  return autocastOp('layerNorm', params, ([input, weight, bias]) =>
    layerNormOf(input, weight, bias, options.eps),
  );
}

function layerNormOf(
  x: Tensor,
  weight: Tensor | null,
  bias: Tensor | null,
  epsilon: number | undefined,
): Tensor {
  const eps = epsilon ?? 1e-5;
  const backend = backendOf('layerNorm', [x, weight, bias]);
  requireFloat('layerNorm', x);
  requireSameDType('layerNorm', [x, weight, bias]);
  if (x.rank === 0) throw new ShapeError('layerNorm', [x.shape], 'needs at least one dimension');
  const cols = x.shape[x.rank - 1]!;
  for (const p of [weight, bias]) {
    if (p && !sameShape(p.shape, [cols])) {
      throw new ShapeError('layerNorm', [x.shape, p.shape], `weight and bias must be [${cols}]`);
    }
  }
  if (!(eps >= 0)) throw new ArgumentError('layerNorm', `eps ${eps} must be non-negative`);
  const rows = cols === 0 ? 0 : x.size / cols;
  const statsDType = x.dtype === 'f64' ? 'f64' : 'f32';
  const out = Tensor.empty(backend, x.shape, x.dtype);
  const meanT = Tensor.empty(backend, [rows], statsDType);
  const rstd = Tensor.empty(backend, [rows], statsDType);
  if (x.size > 0) {
    backend.layerNorm(
      x.kernel('layerNorm'),
      weight?.kernel('layerNorm') ?? null,
      bias?.kernel('layerNorm') ?? null,
      eps,
      out.kernel('layerNorm'),
      meanT.kernel('layerNorm'),
      rstd.kernel('layerNorm'),
    );
  }
  try {
    recordOp('layerNorm', [x, weight, bias], out, { eps, mean: meanT, rstd });
  } finally {
    meanT.free();
    rstd.free();
  }
  return out;
}

/**
 * Rows of `weight` [V, ...] picked by `indices` (i32, any shape): out [...indices.shape, ...].
 * Primitive `embedding`. Ids outside [0, V) throw `IndexError` from the `gather` kernel (on WebGPU
 * at the next read or sync).
 */
export function embedding(weight: Tensor, indices: Tensor): Tensor {
  const backend = backendOf('embedding', [weight, indices]);
  requireDType('embedding', indices, ['i32'], 'indices');
  if (weight.rank < 1) {
    throw new ShapeError(
      'embedding',
      [weight.shape, indices.shape],
      'weight needs at least one dimension',
    );
  }
  const rows = weight.shape[0]!;
  const rowShape = weight.shape.slice(1);
  const dim = rowShape.reduce((p, d) => p * d, 1);
  const out = Tensor.empty(backend, [...indices.shape, ...rowShape], weight.dtype);
  if (out.size > 0) {
    runKernel([out], () =>
      backend.gather(
        kernelAs(weight, 'embedding', [rows, dim]),
        kernelAs(indices, 'embedding', [indices.size]),
        kernelAs(out, 'embedding', [indices.size, dim]),
      ),
    );
  }
  recordOp('embedding', [weight, indices], out, {});
  return out;
}

/**
 * `x` with `src` rows added at `indices` along axis 0 (`torch.index_add(x, 0, indices, src)`):
 * x [V, ...], indices i32 [N], src [N, ...]. Repeated indices accumulate, deterministically.
 * Out of place. Primitive `indexAdd`.
 */
export function indexAdd(x: Tensor, indices: Tensor, src: Tensor): Tensor {
  return autocastOp('indexAdd', [x, indices, src], ([cx, ci, cs]) => indexAddOf(cx, ci, cs));
}

function indexAddOf(x: Tensor, indices: Tensor, src: Tensor): Tensor {
  const backend = checkIndexAdd(x, indices, src);
  const out = Tensor.empty(backend, x.shape, x.dtype);
  backend.copy(x.kernel('indexAdd'), out.kernel('indexAdd'));
  addRows(out, indices, src);
  recordOp('indexAdd', [x, indices, src], out, {});
  return out;
}

/** indexAdd's operands checked (errors name `indexAdd`); their backend. */
function checkIndexAdd(x: Tensor, indices: Tensor, src: Tensor) {
  const backend = backendOf('indexAdd', [x, indices, src]);
  requireDType('indexAdd', indices, ['i32'], 'indices');
  requireSameDType('indexAdd', [x, src]);
  requireFloat('indexAdd', x);
  if (
    x.rank < 1 ||
    indices.rank !== 1 ||
    src.rank !== x.rank ||
    src.shape[0] !== indices.shape[0] ||
    !sameShape(src.shape.slice(1), x.shape.slice(1))
  ) {
    throw new ShapeError(
      'indexAdd',
      [x.shape, indices.shape, src.shape],
      'expected x [V, ...], indices [N] and src [N, ...] with matching trailing dims',
    );
  }
  return backend;
}

/** out[indices[n], ...] += src[n, ...], in place on `out` (checked by `checkIndexAdd`). */
function addRows(out: Tensor, indices: Tensor, src: Tensor): void {
  if (src.size === 0) return;
  const dim = out.shape.slice(1).reduce((p, d) => p * d, 1);
  runKernel([out], () =>
    out.backend.scatterAdd(
      kernelAs(src, 'indexAdd', [indices.size, dim]),
      indices.kernel('indexAdd'),
      kernelAs(out, 'indexAdd', [out.shape[0]!, dim]),
    ),
  );
}

/**
 * Zeros [rows, ...src.shape.slice(1)] with `src` rows added at `indices`: `indexAdd` into zeros,
 * which it makes as its result and adds to in place (an embedding's gradient: GPT-2's is a
 * [50304, 768] table, 154 MB, for 1024 rows of it). The zeros are no input of the recorded op,
 * as nothing differentiates them; src's gradient is indexAdd's.
 */
export function scatterAdd(src: Tensor, indices: Tensor, rows: number): Tensor {
  backendOf('scatterAdd', [src, indices]);
  if (!Number.isInteger(rows) || rows < 0) {
    throw new ArgumentError('scatterAdd', `rows ${rows} must be a non-negative integer`);
  }
  if (src.rank < 1)
    throw new ShapeError('scatterAdd', [src.shape], 'src needs at least one dimension');
  const out = createFull(src.backend, [rows, ...src.shape.slice(1)], src.dtype, 0);
  try {
    checkIndexAdd(out, indices, src);
    addRows(out, indices, src);
  } catch (error) {
    out.free();
    throw error;
  }
  recordOp('indexAdd', [null, indices, src], out, {});
  return out;
}

/** Options of `crossEntropy`. */
export interface CrossEntropyOptions {
  /** 'mean' (default) averages over non-ignored rows, 'sum' adds them, 'none' returns [N]. */
  reduction?: 'mean' | 'sum' | 'none';
  /** Target value whose rows count for nothing. Default -100 (PyTorch). */
  ignoreIndex?: number;
}

/**
 * Cross entropy of logits [N, C] against class targets i32 [N], as `F.cross_entropy`. The
 * per-row losses (f32, f64 for f64 logits) are the primitive `crossEntropy`; reductions are
 * composites (the mean divides by the number of non-ignored rows: NaN when all are ignored, like
 * PyTorch). Targets outside [0, C) other than ignoreIndex throw `IndexError`.
 */
export function crossEntropy(
  logits: Tensor,
  targets: Tensor,
  options: CrossEntropyOptions = {},
): Tensor {
  return autocastOp('crossEntropy', [logits, targets], ([cl, ct]) =>
    crossEntropyOf(cl, ct, options),
  );
}

function crossEntropyOf(logits: Tensor, targets: Tensor, options: CrossEntropyOptions): Tensor {
  const reduction = options.reduction ?? 'mean';
  const ignoreIndex = options.ignoreIndex ?? -100;
  const backend = backendOf('crossEntropy', [logits, targets]);
  requireFloat('crossEntropy', logits);
  requireDType('crossEntropy', targets, ['i32'], 'targets');
  if (logits.rank !== 2 || targets.rank !== 1 || targets.shape[0] !== logits.shape[0]) {
    throw new ShapeError(
      'crossEntropy',
      [logits.shape, targets.shape],
      'expected logits [N, C] and targets [N]',
    );
  }
  if (!['mean', 'sum', 'none'].includes(reduction)) {
    throw new ArgumentError(
      'crossEntropy',
      `reduction must be 'mean', 'sum' or 'none', got '${reduction}'`,
    );
  }
  if (!Number.isInteger(ignoreIndex)) {
    throw new ArgumentError('crossEntropy', `ignoreIndex ${ignoreIndex} is not an integer`);
  }
  const lossDType = logits.dtype === 'f64' ? 'f64' : 'f32';
  const losses = Tensor.empty(backend, [logits.shape[0]!], lossDType);
  if (losses.size > 0) {
    runKernel([losses], () =>
      backend.crossEntropy(
        logits.kernel('crossEntropy'),
        targets.kernel('crossEntropy'),
        losses.kernel('crossEntropy'),
        ignoreIndex,
      ),
    );
  }
  recordOp('crossEntropy', [logits, targets], losses, { ignoreIndex });
  if (reduction === 'none') return losses;
  const total = sum(losses);
  losses.free();
  if (reduction === 'sum') return total;
  const kept = ne(targets, ignoreIndex);
  const keptCount = sum(kept);
  const count = cast(keptCount, lossDType);
  try {
    return div(total, count);
  } finally {
    for (const t of [total, kept, keptCount, count]) t.free();
  }
}

/** Mean squared error, `F.mse_loss`: a composite of sub, square and mean/sum. */
export function mseLoss(
  input: Tensor,
  target: Tensor,
  options: { reduction?: 'mean' | 'sum' | 'none' } = {},
): Tensor {
  return autocastOp('mseLoss', [input, target], ([ci, ct]) => mseLossOf(ci, ct, options));
}

function mseLossOf(
  input: Tensor,
  target: Tensor,
  options: { reduction?: 'mean' | 'sum' | 'none' },
): Tensor {
  const reduction = options.reduction ?? 'mean';
  backendOf('mseLoss', [input, target]);
  requireFloat('mseLoss', input);
  requireSameDType('mseLoss', [input, target]);
  if (!sameShape(input.shape, target.shape)) {
    throw new ShapeError('mseLoss', [input.shape, target.shape], 'input and target shapes differ');
  }
  if (!['mean', 'sum', 'none'].includes(reduction)) {
    throw new ArgumentError(
      'mseLoss',
      `reduction must be 'mean', 'sum' or 'none', got '${reduction}'`,
    );
  }
  const diff = sub(input, target);
  const sq = square(diff);
  diff.free();
  if (reduction === 'none') return sq;
  try {
    return reduction === 'sum' ? sum(sq) : mean(sq);
  } finally {
    sq.free();
  }
}
