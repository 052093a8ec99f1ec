/**
 * Element types. f16 and bf16 are stored packed (two per 32-bit word) where a backend lacks native
 * 16-bit floats. f64 exists on the CPU backend only: it is the dtype of gradient checks against
 * finite differences; the WebGPU backend rejects it with a DTypeError.
 */
export type DType = 'f32' | 'f16' | 'bf16' | 'i32' | 'f64';

/** The dtypes every backend supports. */
export const DTYPES: readonly DType[] = ['f32', 'f16', 'bf16', 'i32'];

export function bytesPerElement(dtype: DType): number {
  switch (dtype) {
    case 'f16':
    case 'bf16':
      return 2;
    case 'f64':
      return 8;
    default:
      return 4;
  }
}

export function isFloatDType(dtype: DType): boolean {
  return dtype !== 'i32';
}

/**
 * The host-side array for a dtype. f32 reads as Float32Array, i32 as Int32Array, f64 as
 * Float64Array; f16 and bf16 keep their raw bits in a Uint16Array (decode with `f16BitsToF32` /
 * `bf16BitsToF32`).
 */
export type HostArray = Float32Array | Int32Array | Uint16Array | Float64Array;

export function hostArrayFor(dtype: DType, length: number): HostArray {
  switch (dtype) {
    case 'f32':
      return new Float32Array(length);
    case 'i32':
      return new Int32Array(length);
    case 'f64':
      return new Float64Array(length);
    default:
      return new Uint16Array(length);
  }
}
