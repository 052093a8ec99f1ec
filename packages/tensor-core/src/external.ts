import type { Backend } from './backend/backend.js';
import { CpuBackend } from './backend/cpu/cpu-backend.js';
import { rawViewAt } from './backend/cpu/cpu-storage.js';
import { bytesPerElement, type DType } from './dtype.js';
import { ArgumentError, BackendError, ShapeError } from './errors.js';
import { TensorStorage } from './storage.js';
import { shapeSize, Tensor } from './tensor.js';

/** Typed arrays a CPU tensor can live in. */
export type ExternalArray = Float32Array | Float64Array | Int32Array | Uint16Array;

/**
 * A CPU-backend tensor over memory the caller owns: `array`'s elements, read and written in place
 * (a collective's registered buffer from `group.allocate`, so collectives on the tensor take their
 * in-place paths; a WebAssembly memory; a shared buffer of worker threads). The backend never pools
 * or frees that memory: `free()` only drops the tensor's reference, and `memoryStats()` counts it
 * as `externalBytes` (and its peak), outside the allocator but under its emulated limit (an
 * `OutOfMemoryError` past it, the array still the caller's: [Note: the limit covers external
 * memory]); `onRelease` tells the
 * owner when the last reference went (`group.free` for a registered buffer). The caller keeps the memory alive while
 * the tensor (or a view, or an autograd node that saved it) is in use.
 *
 * The dtype follows the array (`Float32Array` f32, `Int32Array` i32, `Float64Array` f64); a
 * `Uint16Array` holds f16 or bf16 bits and needs `dtype`. `shape` defaults to `[array.length]`.
 */
export function tensorFromHostArray(
  backend: Backend,
  array: ExternalArray,
  options: {
    shape?: readonly number[];
    dtype?: DType;
    /** Called once when the last reference to the memory goes (the owner may reuse it then). */
    onRelease?: () => void;
  } = {},
): Tensor {
  const op = 'tensorFromHostArray';
  if (!(backend instanceof CpuBackend)) {
    throw new BackendError(
      op,
      `tensors over host memory live on the CPU backend, not ${backend.kind}`,
    );
  }
  const inferred: DType | null =
    array instanceof Float32Array
      ? 'f32'
      : array instanceof Int32Array
        ? 'i32'
        : array instanceof Float64Array
          ? 'f64'
          : null;
  const dtype = options.dtype ?? inferred;
  if (dtype === null) {
    throw new ArgumentError(
      op,
      `a Uint16Array holds f16 or bf16 bits: pass { dtype: 'f16' } or { dtype: 'bf16' }`,
    );
  }
  const fits = inferred === null ? dtype === 'f16' || dtype === 'bf16' : inferred === dtype;
  if (!fits) {
    throw new ArgumentError(op, `a ${array.constructor.name} cannot hold ${dtype} elements`);
  }
  const shape = options.shape ?? [array.length];
  if (shapeSize(shape) !== array.length) {
    throw new ShapeError(
      op,
      [shape, [array.length]],
      `the shape does not hold the array's ${array.length} elements`,
    );
  }
  const element = bytesPerElement(dtype);
  const raw = backend.wrapExternal(
    array.buffer,
    array.byteOffset + array.byteLength,
    array.byteLength,
    options.onRelease,
  );
  return new Tensor(new TensorStorage(backend, raw), array.byteOffset / element, shape, dtype);
}

/**
 * The elements of a tensor whose backend keeps them in host memory (the CPU backend), in place: a
 * view of that memory in storage format (`Float32Array` for f32, `Int32Array` i32, `Float64Array`
 * f64, `Uint16Array` the bits of f16 and bf16) from the tensor's first element. Writes through it
 * change the tensor. null where the storage is not host memory (WebGPU): read the tensor instead.
 * The view is valid while the tensor is; what collectives and DDP buckets read and write in place.
 * `op` names the caller in the error of a freed tensor.
 */
export function hostArrayOf(tensor: Tensor, op: string): ExternalArray | null {
  if (!(tensor.backend instanceof CpuBackend)) return null;
  const buffer = (tensor.kernel(op).storage as { buffer: ArrayBuffer }).buffer;
  return rawViewAt(buffer, tensor.dtype, tensor.offset, tensor.size);
}
