import type { DType } from '../../dtype.js';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../../dtype-convert.js';
import type { KernelTensor, RawStorage } from '../backend.js';

/** Numbers a CPU kernel reads or writes: a typed array in the value domain of the dtype. */
export type Values = Float32Array | Float64Array | Int32Array;

/** The CPU backend's storage: an ArrayBuffer from the caching allocator. */
export interface CpuStorage extends RawStorage {
  readonly buffer: ArrayBuffer;
}

function arrayBufferOf(t: { storage: RawStorage }): ArrayBuffer {
  return (t.storage as CpuStorage).buffer;
}

/** The raw elements (bit patterns for f16/bf16) of a contiguous operand, as a view. */
export function rawView(t: KernelTensor): Float32Array | Float64Array | Int32Array | Uint16Array {
  return rawViewAt(arrayBufferOf(t), t.dtype, t.offset, shapeCount(t.shape));
}

export function rawViewAt(
  buffer: ArrayBuffer,
  dtype: DType,
  offset: number,
  length: number,
): Float32Array | Float64Array | Int32Array | Uint16Array {
  switch (dtype) {
    case 'f32':
      return new Float32Array(buffer, offset * 4, length);
    case 'f64':
      return new Float64Array(buffer, offset * 8, length);
    case 'i32':
      return new Int32Array(buffer, offset * 4, length);
    default:
      return new Uint16Array(buffer, offset * 2, length);
  }
}

export function shapeCount(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/**
 * The values of an operand: a view for f32/f64/i32, a decoded Float32Array copy for f16/bf16.
 * `length` defaults to the shape's element count.
 */
export function readValues(t: KernelTensor, length = shapeCount(t.shape)): Values {
  const raw = rawViewAt(arrayBufferOf(t), t.dtype, t.offset, length);
  if (!(raw instanceof Uint16Array)) return raw;
  const decode = t.dtype === 'f16' ? f16BitsToF32 : bf16BitsToF32;
  const out = new Float32Array(length);
  for (let i = 0; i < length; i++) out[i] = decode(raw[i]!);
  return out;
}

/**
 * [Note: CPU stores round once per dtype]
 * Kernels compute in JS doubles and write into `values`: for f32, f64 and i32 that is the storage
 * itself (a Float32Array store is one round-to-nearest-even; an Int32Array store truncates). For
 * f16 and bf16, `values` is an f32 scratch array and `commit()` encodes it with the integer RNE
 * helpers of dtype-convert.ts, bit-identical to what the WebGPU backend writes.
 */
export interface OutputValues {
  readonly values: Values;
  commit(): void;
}

const noCommit = (): void => {};

export function outputValues(t: KernelTensor, length = shapeCount(t.shape)): OutputValues {
  const raw = rawViewAt(arrayBufferOf(t), t.dtype, t.offset, length);
  if (!(raw instanceof Uint16Array)) return { values: raw, commit: noCommit };
  const values = new Float32Array(length);
  const encode = t.dtype === 'f16' ? f32ToF16Bits : f32ToBf16Bits;
  return {
    values,
    commit: () => {
      for (let i = 0; i < length; i++) raw[i] = encode(values[i]!);
    },
  };
}

/** Like `outputValues`, but for an in-place update: f16/bf16 scratch starts with the current values. */
export function inoutValues(t: KernelTensor): OutputValues {
  const out = outputValues(t);
  if (t.dtype === 'f16' || t.dtype === 'bf16') out.values.set(readValues(t));
  return out;
}
