import type { Backend } from '../backend/backend.js';
import type { DType } from '../dtype.js';
import { Tensor } from '../tensor.js';

/** A new tensor filled with `value` on an explicit backend (ops use it for internal constants). */
export function createFull(
  backend: Backend,
  shape: readonly number[],
  dtype: DType,
  value: number,
): Tensor {
  const out = Tensor.empty(backend, shape, dtype);
  if (out.size > 0) backend.fill(out.kernel('full'), value);
  return out;
}
