import type { ReductionOp } from '../backend/backend.js';
import { recordOp } from '../autograd/record.js';
import { DTypeError, ShapeError } from '../errors.js';
import { Tensor } from '../tensor.js';
import { withAutocastExcluded } from '../autocast-state.js';
import { autocastOp } from './autocast-policy.js';
import { mul } from './elementwise.js';
import { backendOf, kernelAs, normalizeAxes, normalizeAxis } from './validate.js';

/** Options of the reductions. */
export interface ReduceOptions {
  /** Keep reduced dims as size 1 (PyTorch `keepdim`). */
  keepDim?: boolean;
}

/** An axis, several axes, or undefined for all axes. Negative axes count from the end. */
export type Axes = number | readonly number[] | undefined;

/**
 * Reduce `axes` one at a time (highest first) with the kernel, then give the result the keepDim
 * shape (the element layout is the same). Intermediates are freed.
 */
function reduceAxes(
  op: ReductionOp,
  name: string,
  x: Tensor,
  axes: number[],
  keepDim: boolean,
): Tensor {
  const finalShape = keepDim
    ? x.shape.map((d, i) => (axes.includes(i) ? 1 : d))
    : x.shape.filter((_, i) => !axes.includes(i));
  if (axes.length === 0) {
    const out = Tensor.empty(x.backend, finalShape, x.dtype);
    x.backend.copy(x.kernel(name), out.kernel(name));
    return out;
  }
  let current = x;
  let currentShape = [...x.shape];
  for (let i = axes.length - 1; i >= 0; i--) {
    const axis = axes[i]!;
    const reducedShape = currentShape.filter((_, j) => j !== axis);
    const next = Tensor.empty(x.backend, i === 0 ? finalShape : reducedShape, x.dtype);
    x.backend.reduce(
      op,
      kernelAs(current, name, currentShape),
      axis,
      kernelAs(next, name, reducedShape),
    );
    if (current !== x) current.free();
    current = next;
    currentShape = reducedShape;
  }
  return current;
}

/** Sum over `axes` (all by default). Primitive `sum`. f32 inside `autocast`, as PyTorch's. */
export function sum(x: Tensor, axes?: Axes, options: ReduceOptions = {}): Tensor {
  return autocastOp('sum', [x], ([input]) => sumOf(input, axes, options));
}

function sumOf(x: Tensor, axes: Axes, options: ReduceOptions): Tensor {
  backendOf('sum', [x]);
  const list = normalizeAxes('sum', axes, x.shape);
  const keepDim = options.keepDim ?? false;
  const out = reduceAxes('sum', 'sum', x, list, keepDim);
  recordOp('sum', [x], out, { axes: list, keepDim, inputShape: x.shape });
  return out;
}

/**
 * Mean over `axes` (all by default): a composite, sum times 1/count. Floats only. In its input's
 * dtype inside `autocast` too (PyTorch's lists leave `mean` out).
 */
export function mean(x: Tensor, axes?: Axes, options: ReduceOptions = {}): Tensor {
  return withAutocastExcluded(() => meanOf(x, axes, options));
}

function meanOf(x: Tensor, axes: Axes, options: ReduceOptions): Tensor {
  if (x.dtype === 'i32') {
    throw new DTypeError('mean', [x.dtype], 'needs a floating point tensor (cast i32 first)');
  }
  const list = normalizeAxes('mean', axes, x.shape);
  const count = list.reduce((p, a) => p * x.shape[a]!, 1);
  const total = sum(x, list, options);
  try {
    return mul(total, 1 / count);
  } finally {
    total.free();
  }
}

function extremum(op: 'max' | 'min', x: Tensor, axes: Axes, options: ReduceOptions): Tensor {
  backendOf(op, [x]);
  const list = normalizeAxes(op, axes, x.shape);
  if (list.some((a) => x.shape[a] === 0)) {
    throw new ShapeError(op, [x.shape], 'cannot reduce over an empty axis (no identity)');
  }
  const keepDim = options.keepDim ?? false;
  const out = reduceAxes(op, op, x, list, keepDim);
  recordOp(op, [x], out, { axes: list, keepDim, inputShape: x.shape });
  return out;
}

/** Maximum over `axes` (all by default); NaN propagates. Primitive `max`. */
export function max(x: Tensor, axes?: Axes, options: ReduceOptions = {}): Tensor {
  return extremum('max', x, axes, options);
}

/** Minimum over `axes` (all by default); NaN propagates. Primitive `min`. */
export function min(x: Tensor, axes?: Axes, options: ReduceOptions = {}): Tensor {
  return extremum('min', x, axes, options);
}

/**
 * Index (i32) of the first maximum along `axis`, or over the flattened tensor when `axis` is
 * undefined. Not differentiable.
 */
export function argmax(x: Tensor, axis?: number, options: ReduceOptions = {}): Tensor {
  backendOf('argmax', [x]);
  const keepDim = options.keepDim ?? false;
  if (axis === undefined) {
    if (x.size === 0)
      throw new ShapeError('argmax', [x.shape], 'cannot take argmax of an empty tensor');
    const out = Tensor.empty(x.backend, keepDim ? x.shape.map(() => 1) : [], 'i32');
    x.backend.reduce('argmax', kernelAs(x, 'argmax', [x.size]), 0, kernelAs(out, 'argmax', []));
    return out;
  }
  const a = normalizeAxis('argmax', axis, x.shape);
  if (x.shape[a] === 0) {
    throw new ShapeError('argmax', [x.shape], 'cannot take argmax over an empty axis');
  }
  const reduced = x.shape.filter((_, i) => i !== a);
  const out = Tensor.empty(
    x.backend,
    keepDim ? x.shape.map((d, i) => (i === a ? 1 : d)) : reduced,
    'i32',
  );
  x.backend.reduce('argmax', x.kernel('argmax'), a, kernelAs(out, 'argmax', reduced));
  return out;
}
