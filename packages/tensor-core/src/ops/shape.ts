import type { StridedOperand } from '../backend/backend.js';
import { recordOp } from '../autograd/record.js';
import { ArgumentError, ShapeError } from '../errors.js';
import { shapeSize, Tensor } from '../tensor.js';
import { backendOf, contiguousStrides, normalizeAxis, requireSameDType } from './validate.js';
import { autocastOp } from './autocast-policy.js';

/** Resolve one -1 in a target shape against `size` elements. */
function inferShape(op: string, from: readonly number[], shape: readonly number[]): number[] {
  const size = shapeSize(from);
  const unknown = shape.filter((d) => d === -1).length;
  if (unknown > 1) throw new ShapeError(op, [from, shape], 'only one dimension can be -1');
  for (const d of shape) {
    if (d !== -1 && (!Number.isInteger(d) || d < 0)) {
      throw new ShapeError(op, [from, shape], `dimension ${d} is not a non-negative integer`);
    }
  }
  if (unknown === 1) {
    const known = shape.reduce((p, d) => (d === -1 ? p : p * d), 1);
    if (known === 0 || size % known !== 0) {
      throw new ShapeError(op, [from, shape], `cannot infer -1 for ${size} elements`);
    }
    return shape.map((d) => (d === -1 ? size / known : d));
  }
  if (shapeSize(shape) !== size) {
    throw new ShapeError(
      op,
      [from, shape],
      `cannot reshape ${size} elements into ${shapeSize(shape)}`,
    );
  }
  return [...shape];
}

/**
 * x with another shape of the same element count (one dim may be -1). Every tensor is contiguous,
 * so this is always a view sharing x's storage. Primitive `reshape`.
 */
export function reshape(x: Tensor, shape: readonly number[]): Tensor {
  backendOf('reshape', [x]);
  const target = inferShape('reshape', x.shape, shape);
  const out = x.view(target);
  recordOp('reshape', [x], out, { shape: x.shape });
  return out;
}

/** Same as `reshape` (PyTorch's `view`: storage is shared). */
export function view(x: Tensor, shape: readonly number[]): Tensor {
  return reshape(x, shape);
}

/** Merge dims startDim..endDim into one (a reshape). */
export function flatten(x: Tensor, startDim = 0, endDim = -1): Tensor {
  if (x.rank === 0) return reshape(x, [1]);
  const start = normalizeAxis('flatten', startDim, x.shape);
  const end = normalizeAxis('flatten', endDim, x.shape);
  if (start > end) {
    throw new ShapeError('flatten', [x.shape], `startDim ${startDim} comes after endDim ${endDim}`);
  }
  const merged = x.shape.slice(start, end + 1).reduce((p, d) => p * d, 1);
  return reshape(x, [...x.shape.slice(0, start), merged, ...x.shape.slice(end + 1)]);
}

/** Insert a size-1 dim at `axis` (in [-rank-1, rank]). A reshape. */
export function unsqueeze(x: Tensor, axis: number): Tensor {
  const rank = x.rank + 1;
  if (!Number.isInteger(axis) || axis < -rank || axis >= rank) {
    throw new ShapeError('unsqueeze', [x.shape], `axis ${axis} is out of range for rank ${rank}`);
  }
  const a = axis < 0 ? axis + rank : axis;
  return reshape(x, [...x.shape.slice(0, a), 1, ...x.shape.slice(a)]);
}

/** Drop size-1 dims (all, or the given ones; a given dim that is not 1 is kept, as in PyTorch). */
export function squeeze(x: Tensor, axes?: number | readonly number[]): Tensor {
  const drop = new Set(
    axes === undefined
      ? x.shape.flatMap((d, i) => (d === 1 ? [i] : []))
      : (typeof axes === 'number' ? [axes] : axes).map((a) => normalizeAxis('squeeze', a, x.shape)),
  );
  return reshape(
    x,
    x.shape.filter((d, i) => !(drop.has(i) && d === 1)),
  );
}

function strided(t: Tensor, op: string, strides: readonly number[], offset = 0): StridedOperand {
  const k = t.kernel(op);
  return { storage: k.storage, offset: k.offset + offset, dtype: k.dtype, strides };
}

/** Reorder dims: out.shape[i] = x.shape[dims[i]]. Allocates. Primitive `permute`. */
export function permute(x: Tensor, dims: readonly number[]): Tensor {
  backendOf('permute', [x]);
  if (dims.length !== x.rank) {
    throw new ShapeError(
      'permute',
      [x.shape],
      `dims [${dims.join(', ')}] do not match rank ${x.rank}`,
    );
  }
  const axes = dims.map((d) => normalizeAxis('permute', d, x.shape));
  if (new Set(axes).size !== axes.length) {
    throw new ShapeError('permute', [x.shape], `dims [${dims.join(', ')}] repeat an axis`);
  }
  const inStrides = contiguousStrides(x.shape);
  const shape = axes.map((a) => x.shape[a]!);
  const out = Tensor.empty(x.backend, shape, x.dtype);
  x.backend.copyStrided(
    strided(
      x,
      'permute',
      axes.map((a) => inStrides[a]!),
    ),
    strided(out, 'permute', contiguousStrides(shape)),
    shape,
  );
  recordOp('permute', [x], out, { dims: axes });
  return out;
}

/** Swap two dims (the last two by default). A permute. */
export function transpose(x: Tensor, dim0 = -2, dim1 = -1): Tensor {
  const a = normalizeAxis('transpose', dim0, x.shape);
  const b = normalizeAxis('transpose', dim1, x.shape);
  const dims = x.shape.map((_, i) => i);
  dims[a] = b;
  dims[b] = a;
  return permute(x, dims);
}

/** One axis of a slice: Python's `start:end:step`, negative start/end count from the end. */
export interface SliceRange {
  start?: number;
  end?: number;
  step?: number;
}

/**
 * x[ranges[0], ranges[1], ...] with Python slice semantics per axis (missing or null ranges take
 * the whole axis; step > 0). Allocates. Primitive `slice`.
 */
export function slice(x: Tensor, ranges: readonly (SliceRange | null | undefined)[]): Tensor {
  backendOf('slice', [x]);
  if (ranges.length > x.rank) {
    throw new ShapeError('slice', [x.shape], `${ranges.length} ranges for rank ${x.rank}`);
  }
  const starts: number[] = [];
  const ends: number[] = [];
  const steps: number[] = [];
  const shape: number[] = [];
  x.shape.forEach((dim, axis) => {
    const range = ranges[axis] ?? {};
    const step = range.step ?? 1;
    if (!Number.isInteger(step) || step <= 0) {
      throw new ArgumentError('slice', `axis ${axis}: step ${step} must be a positive integer`);
    }
    const clamp = (v: number | undefined, fallback: number): number => {
      if (v === undefined) return fallback;
      if (!Number.isInteger(v)) {
        throw new ArgumentError('slice', `axis ${axis}: bound ${v} is not an integer`);
      }
      const r = v < 0 ? v + dim : v;
      return Math.min(Math.max(r, 0), dim);
    };
    const start = clamp(range.start, 0);
    const end = Math.max(clamp(range.end, dim), start);
    starts.push(start);
    ends.push(end);
    steps.push(step);
    shape.push(Math.ceil((end - start) / step));
  });
  const inStrides = contiguousStrides(x.shape);
  const offset = starts.reduce((p, s, i) => p + s * inStrides[i]!, 0);
  const out = Tensor.empty(x.backend, shape, x.dtype);
  if (out.size > 0) {
    x.backend.copyStrided(
      strided(
        x,
        'slice',
        inStrides.map((s, i) => s * steps[i]!),
        offset,
      ),
      strided(out, 'slice', contiguousStrides(shape)),
      shape,
    );
  }
  recordOp('slice', [x], out, { starts, ends, steps, inputShape: x.shape });
  return out;
}

/** `length` elements of `axis` from `start` (a slice). */
export function narrow(x: Tensor, axis: number, start: number, length: number): Tensor {
  const a = normalizeAxis('narrow', axis, x.shape);
  const dim = x.shape[a]!;
  const s = start < 0 ? start + dim : start;
  if (
    !Number.isInteger(s) ||
    !Number.isInteger(length) ||
    s < 0 ||
    length < 0 ||
    s + length > dim
  ) {
    throw new ShapeError(
      'narrow',
      [x.shape],
      `start ${start} and length ${length} do not fit axis ${a} of size ${dim}`,
    );
  }
  const ranges: SliceRange[] = [];
  ranges[a] = { start: s, end: s + length };
  return slice(x, ranges);
}

/** Split `axis` into pieces of `sizes` (a number: equal pieces, the last may be smaller). Slices. */
export function split(x: Tensor, sizes: number | readonly number[], axis = 0): Tensor[] {
  const a = normalizeAxis('split', axis, x.shape);
  const dim = x.shape[a]!;
  let list: number[];
  if (typeof sizes === 'number') {
    if (!Number.isInteger(sizes) || sizes <= 0) {
      throw new ArgumentError('split', `size ${sizes} must be a positive integer`);
    }
    list = [];
    for (let s = 0; s < dim; s += sizes) list.push(Math.min(sizes, dim - s));
    if (dim === 0) list.push(0);
  } else {
    list = [...sizes];
    const total = list.reduce((p, s) => p + s, 0);
    if (total !== dim || list.some((s) => !Number.isInteger(s) || s < 0)) {
      throw new ShapeError(
        'split',
        [x.shape],
        `sizes [${list.join(', ')}] do not sum to ${dim} on axis ${a}`,
      );
    }
  }
  const out: Tensor[] = [];
  let start = 0;
  for (const size of list) {
    out.push(narrow(x, a, start, size));
    start += size;
  }
  return out;
}

/** `chunks` pieces of ceil(dim / chunks) along `axis` (fewer if the dim is small), like torch.chunk. */
export function chunk(x: Tensor, chunks: number, axis = 0): Tensor[] {
  if (!Number.isInteger(chunks) || chunks <= 0) {
    throw new ArgumentError('chunk', `chunks ${chunks} must be a positive integer`);
  }
  const a = normalizeAxis('chunk', axis, x.shape);
  return split(x, Math.max(1, Math.ceil(x.shape[a]! / chunks)), a);
}

/**
 * Join tensors of one dtype along `axis`; other dims must agree. Primitive `concat`. Inside
 * `autocast`, tensors of several floating dtypes are promoted to the widest.
 */
export function concat(tensors: readonly Tensor[], axis = 0): Tensor {
  return autocastOp('concat', tensors, (ts) => concatOf(ts, axis));
}

function concatOf(tensors: readonly Tensor[], axis: number): Tensor {
  if (tensors.length === 0) throw new ArgumentError('concat', 'needs at least one tensor');
  const backend = backendOf('concat', tensors);
  const dtype = requireSameDType('concat', tensors);
  const first = tensors[0]!;
  const a = normalizeAxis('concat', axis, first.shape);
  for (const t of tensors) {
    if (t.rank !== first.rank || t.shape.some((d, i) => i !== a && d !== first.shape[i])) {
      throw new ShapeError(
        'concat',
        tensors.map((x) => x.shape),
        `shapes differ outside axis ${a}`,
      );
    }
  }
  const sizes = tensors.map((t) => t.shape[a]!);
  const shape = [...first.shape];
  shape[a] = sizes.reduce((p, s) => p + s, 0);
  const out = Tensor.empty(backend, shape, dtype);
  const outStrides = contiguousStrides(shape);
  let start = 0;
  for (const t of tensors) {
    if (t.size > 0) {
      backend.copyStrided(
        strided(t, 'concat', contiguousStrides(t.shape)),
        strided(out, 'concat', outStrides, start * outStrides[a]!),
        t.shape,
      );
    }
    start += t.shape[a]!;
  }
  recordOp('concat', tensors, out, { axis: a, sizes });
  return out;
}

/**
 * x broadcast to `shape` (new leading dims allowed; -1 keeps a dim), copied. Primitive `expand`
 * (its gradient sums over the broadcast dims).
 */
export function expand(x: Tensor, shape: readonly number[]): Tensor {
  backendOf('expand', [x]);
  if (shape.length < x.rank) {
    throw new ShapeError('expand', [x.shape, shape], 'target has fewer dims than the tensor');
  }
  const lead = shape.length - x.rank;
  const inStrides = contiguousStrides(x.shape);
  const target: number[] = [];
  const strides: number[] = [];
  shape.forEach((d, i) => {
    const j = i - lead;
    const src = j >= 0 ? x.shape[j]! : 1;
    const size = d === -1 && j >= 0 ? src : d;
    if (!Number.isInteger(size) || size < 0 || (src !== 1 && src !== size)) {
      throw new ShapeError(
        'expand',
        [x.shape, shape],
        `dimension ${i} cannot expand ${src} to ${d}`,
      );
    }
    target.push(size);
    strides.push(j >= 0 && src !== 1 ? inStrides[j]! : 0);
  });
  const out = Tensor.empty(x.backend, target, x.dtype);
  if (out.size > 0) {
    x.backend.copyStrided(
      strided(x, 'expand', strides),
      strided(out, 'expand', contiguousStrides(target)),
      target,
    );
  }
  recordOp('expand', [x], out, { inputShape: x.shape });
  return out;
}

/** Same as `expand`. */
export function broadcastTo(x: Tensor, shape: readonly number[]): Tensor {
  return expand(x, shape);
}
