import { recordOp } from '../autograd/record.js';
import type { DType } from '../dtype.js';
import { DTypeError, ShapeError } from '../errors.js';
import { Tensor } from '../tensor.js';
import { backendOf, sameShape } from './validate.js';

const DTYPE_NAMES: readonly DType[] = ['f32', 'f16', 'bf16', 'i32', 'f64'];

/**
 * x converted to `dtype` (a copy even when the dtype is the same), the same bits on every backend.
 * Floats round to nearest even (i32 to f16/bf16 through f32); float to i32 truncates toward zero
 * and saturates to the i32 range, NaN to 0 (see [Note: cast semantics]). Primitive `cast` (attrs:
 * `from`, the input dtype).
 */
export function cast(x: Tensor, dtype: DType): Tensor {
  backendOf('cast', [x]);
  if (!DTYPE_NAMES.includes(dtype)) {
    throw new DTypeError('cast', [String(dtype)], 'unknown target dtype');
  }
  const out = Tensor.empty(x.backend, x.shape, dtype);
  if (out.size > 0) x.backend.cast(x.kernel('cast'), out.kernel('cast'));
  recordOp('cast', [x], out, { from: x.dtype });
  return out;
}

/** Same as `cast`. */
export function toDType(x: Tensor, dtype: DType): Tensor {
  return cast(x, dtype);
}

/** A copy of x in new storage (a `cast` to its own dtype). */
export function clone(x: Tensor): Tensor {
  return cast(x, x.dtype);
}

/** dst = src in place (same shape; src's dtype is converted). Not recorded by autograd. */
export function copy_(dst: Tensor, src: Tensor): Tensor {
  const backend = backendOf('copy_', [dst, src]);
  if (!sameShape(dst.shape, src.shape)) {
    throw new ShapeError('copy_', [dst.shape, src.shape], 'source and destination shapes differ');
  }
  if (dst.size === 0) return dst;
  if (dst.dtype === src.dtype) backend.copy(src.kernel('copy_'), dst.kernel('copy_'));
  else backend.cast(src.kernel('copy_'), dst.kernel('copy_'));
  return dst;
}

/** Every element of t = value, in place. Not recorded by autograd. */
export function fill_(t: Tensor, value: number): Tensor {
  backendOf('fill_', [t]);
  if (t.size > 0) t.backend.fill(t.kernel('fill_'), value);
  return t;
}
