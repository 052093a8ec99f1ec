/** Element types. f16 and bf16 are stored packed (two per 32-bit word) where a backend lacks native 16-bit floats. */
export type DType = 'f32' | 'f16' | 'bf16' | 'i32';

export const DTYPES: readonly DType[] = ['f32', 'f16', 'bf16', 'i32'];

export function bytesPerElement(dtype: DType): number {
  return dtype === 'f16' || dtype === 'bf16' ? 2 : 4;
}

export function isFloatDType(dtype: DType): boolean {
  return dtype !== 'i32';
}

/**
 * The host-side array for a dtype. f32 reads as Float32Array, i32 as Int32Array; f16 and bf16 keep
 * their raw bits in a Uint16Array (decode with `f16BitsToF32` / `bf16BitsToF32`).
 */
export type HostArray = Float32Array | Int32Array | Uint16Array;

export function hostArrayFor(dtype: DType, length: number): HostArray {
  switch (dtype) {
    case 'f32':
      return new Float32Array(length);
    case 'i32':
      return new Int32Array(length);
    default:
      return new Uint16Array(length);
  }
}
