import type { Backend, KernelTensor } from '../backend/backend.js';
import type { DType } from '../dtype.js';
import { ArgumentError, BackendError, DTypeError, ShapeError } from '../errors.js';
import { getDefaultBackend } from '../runtime.js';
import type { Tensor } from '../tensor.js';

/** The one backend of an op's tensor operands; also checks none is freed (`FreedTensorError`). */
export function backendOf(op: string, tensors: readonly (Tensor | null | undefined)[]): Backend {
  let backend: Backend | undefined;
  for (const t of tensors) {
    if (!t) continue;
    t.storage(op);
    if (backend === undefined) backend = t.backend;
    else if (t.backend !== backend) {
      throw new BackendError(
        op,
        `operands are on two backends (${backend.kind} and ${t.backend.kind}): move one with tensor.to(backend)`,
      );
    }
  }
  if (backend === undefined) throw new ArgumentError(op, 'needs at least one tensor operand');
  return backend;
}

export function resolveBackend(backend: Backend | undefined): Backend {
  return backend ?? getDefaultBackend();
}

export function requireFloat(op: string, t: Tensor): void {
  requireFloatDType(op, t.dtype);
}

export function requireFloatDType(op: string, dtype: DType): void {
  if (dtype === 'i32') {
    throw new DTypeError(op, [dtype], 'needs a floating point tensor (f32, f16, bf16, f64)');
  }
}

export function requireDType(
  op: string,
  t: Tensor,
  dtypes: readonly DType[],
  what = 'input',
): void {
  if (!dtypes.includes(t.dtype)) {
    throw new DTypeError(op, [t.dtype], `${what} must be ${dtypes.join(' or ')}`);
  }
}

export function requireSameDType(
  op: string,
  tensors: readonly (Tensor | null | undefined)[],
): DType {
  let dtype: DType | undefined;
  for (const t of tensors) {
    if (!t) continue;
    if (dtype === undefined) dtype = t.dtype;
    else if (t.dtype !== dtype) {
      throw new DTypeError(
        op,
        tensors.flatMap((x) => (x ? [x.dtype] : [])),
        'operands must share a dtype (cast one first)',
      );
    }
  }
  return dtype!;
}

/** A valid axis in [0, rank) from a possibly negative one. */
export function normalizeAxis(op: string, axis: number, shape: readonly number[]): number {
  const rank = shape.length;
  if (!Number.isInteger(axis) || axis < -rank || axis >= rank) {
    throw new ShapeError(op, [shape], `axis ${axis} is out of range for rank ${rank}`);
  }
  return axis < 0 ? axis + rank : axis;
}

/** Normalized, sorted, distinct axes; undefined means all axes. */
export function normalizeAxes(
  op: string,
  axes: number | readonly number[] | undefined,
  shape: readonly number[],
): number[] {
  if (axes === undefined) return shape.map((_, i) => i);
  const list = typeof axes === 'number' ? [axes] : axes;
  const out = list.map((a) => normalizeAxis(op, a, shape));
  if (new Set(out).size !== out.length) {
    throw new ShapeError(op, [shape], `axes [${list.join(', ')}] repeat an axis`);
  }
  return out.sort((a, b) => a - b);
}

/** NumPy broadcasting of several shapes. */
export function broadcastShapes(op: string, shapes: readonly (readonly number[])[]): number[] {
  const rank = Math.max(0, ...shapes.map((s) => s.length));
  const out = new Array<number>(rank).fill(1);
  for (const shape of shapes) {
    for (let i = 0; i < shape.length; i++) {
      const o = rank - shape.length + i;
      const d = shape[i]!;
      if (out[o] === 1) out[o] = d;
      else if (d !== 1 && d !== out[o]) {
        throw new ShapeError(op, shapes, `shapes do not broadcast at dimension ${o}`);
      }
    }
  }
  return out;
}

export function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

/** A kernel operand of `t` that reads `t`'s storage with another (same-size) shape. */
export function kernelAs(t: Tensor, op: string, shape: readonly number[]): KernelTensor {
  return { ...t.kernel(op), shape };
}

/** Run a kernel that writes `outputs`; free them if it throws (an out-of-range index on the CPU). */
export function runKernel(outputs: readonly Tensor[], kernel: () => void): void {
  try {
    kernel();
  } catch (error) {
    for (const t of outputs) t.free();
    throw error;
  }
}

/** Contiguous strides of a shape. */
export function contiguousStrides(shape: readonly number[]): number[] {
  const strides = new Array<number>(shape.length);
  let stride = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    strides[i] = stride;
    stride *= shape[i]!;
  }
  return strides;
}
