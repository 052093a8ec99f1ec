/**
 * Bit-exact conversions between f32 and the 16-bit float formats, with integer operations only, so
 * every backend and every rank rounds identically (SwiftShader's `pack2x16float` flushes f16
 * subnormals; see ANCHORS.md). Rounding is to nearest, ties to even; NaN stays NaN.
 */
const f32Buffer = new Float32Array(1);
const u32View = new Uint32Array(f32Buffer.buffer);

export function f32ToBits(value: number): number {
  f32Buffer[0] = value;
  return u32View[0]!;
}

export function bitsToF32(bits: number): number {
  u32View[0] = bits >>> 0;
  return f32Buffer[0]!;
}

/** f32 to bf16 bits, round to nearest even. */
export function f32ToBf16Bits(value: number): number {
  const bits = f32ToBits(value);
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x007fffff) !== 0) {
    return ((bits >>> 16) | 0x0040) & 0xffff; // quiet NaN, keep the sign
  }
  const lsb = (bits >>> 16) & 1;
  return ((bits + 0x7fff + lsb) >>> 16) & 0xffff;
}

export function bf16BitsToF32(bits: number): number {
  return bitsToF32((bits & 0xffff) << 16);
}

/** f32 to IEEE half bits, round to nearest even, with subnormals and overflow to infinity. */
export function f32ToF16Bits(value: number): number {
  const bits = f32ToBits(value);
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  let mant = bits & 0x007fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x0200 : 0);
  // Unbiased exponent, rebias for half (15).
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign; // rounds to zero
    mant |= 0x00800000; // implicit bit
    const shift = 14 - e; // 14..24
    const half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    const rounded = rem > halfway || (rem === halfway && (half & 1) === 1) ? half + 1 : half;
    return sign | rounded;
  }
  const half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  const rounded = rem > 0x1000 || (rem === 0x1000 && (half & 1) === 1) ? half + 1 : half;
  return sign | rounded; // a carry into the exponent is the correct rounding (up to infinity)
}

export function f16BitsToF32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const mant = bits & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant !== 0 ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/**
 * [Note: cast semantics]
 *
 * `cast` between f32, f16, bf16 and i32 (and f64 on the CPU) gives the same bits on every backend:
 * - float to float: through f32, rounding to nearest even at each narrowing (f64 to f16 rounds to
 *   f32 first, as f16 to bf16 goes through its exact f32 value); widening is exact.
 * - i32 to float: to f32 rounding to nearest even (16777217 -> 16777216, 16777219 -> 16777220),
 *   then to f16/bf16 as above: two roundings, as PyTorch's int-to-half goes through float. The
 *   WGSL kernel rounds with integer code (`i32_to_f32`) instead of trusting `f32(i32)`, whose
 *   rounding WGSL leaves to the implementation.
 * - float to i32: truncate toward zero, then saturate to [-2^31, 2^31 - 1]; NaN gives 0 (Rust's
 *   `as`, and what WGSL's `i32(f32)` does except that its NaN result is unspecified, hence the
 *   explicit check in `f32_to_i32`). So inf -> 2147483647, -3e9 -> -2147483648, 2^31 -> 2147483647.
 * - NaN stays NaN between floats; its sign and payload are not specified.
 */
export function saturateToI32(value: number): number {
  if (Number.isNaN(value)) return 0;
  if (value >= 2147483647) return 2147483647;
  if (value <= -2147483648) return -2147483648;
  return Math.trunc(value) | 0;
}

/** Round a number as storing it in `dtype` would (f32: Math.fround; i32: truncate toward zero; f64: as is). */
export function roundToDType(value: number, dtype: 'f32' | 'f16' | 'bf16' | 'i32' | 'f64'): number {
  switch (dtype) {
    case 'f64':
      return value;
    case 'f32':
      return Math.fround(value);
    case 'f16':
      return f16BitsToF32(f32ToF16Bits(value));
    case 'bf16':
      return bf16BitsToF32(f32ToBf16Bits(value));
    case 'i32':
      return Math.trunc(value) | 0;
  }
}
