import { describe, expect, it } from 'vitest';
import {
  bf16BitsToF32,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  roundToDType,
} from './dtype-convert.js';

// Expected bits made with numpy 1.24 (astype(float16)) and PyTorch 1.13 (.to(torch.bfloat16)) on the
// f32 values below: ties, subnormals, the largest finite values, overflow and infinities.
const cases: [number, number, number][] = [
  [0.0, 0, 0],
  [-0.0, 32768, 32768],
  [1.0, 15360, 16256],
  [-1.0, 48128, 49024],
  [0.10000000149011612, 11878, 15821],
  [0.3333333432674408, 13653, 16043],
  [65504.0, 31743, 18304],
  [65519.98828125, 31743, 18304],
  [65520.0, 31744, 18304],
  [9.99999993922529e-9, 0, 12844],
  [2 ** -24, 1, 13184],
  [2 ** -25, 0, 13056],
  [2.980232594040899e-8, 1, 13056],
  [6.103515625e-5, 1024, 14464],
  [6.097555160522461e-5, 1023, 14464],
  [9.999999680285692e37, 31744, 32406],
  [3.4028234663852886e38, 31744, 32640],
  [Number.POSITIVE_INFINITY, 31744, 32640],
  [Number.NEGATIVE_INFINITY, 64512, 65408],
  [1.00048828125, 15360, 16256],
  [1.00146484375, 15362, 16256],
  [2049.0, 26624, 17664],
  [2051.0, 26626, 17664],
  [-7.62939453125e-6, 32896, 46848],
];

describe('f32 to f16 and bf16, round to nearest even', () => {
  it.each(cases)('%d', (value, f16, bf16) => {
    expect(f32ToF16Bits(value)).toBe(f16);
    expect(f32ToBf16Bits(value)).toBe(bf16);
  });

  it('keeps NaN a NaN with its sign', () => {
    expect(Number.isNaN(f16BitsToF32(f32ToF16Bits(Number.NaN)))).toBe(true);
    expect(Number.isNaN(bf16BitsToF32(f32ToBf16Bits(Number.NaN)))).toBe(true);
    expect(f32ToBf16Bits(-Number.NaN) & 0x7f80).toBe(0x7f80);
  });

  it('round-trips every f16 and bf16 bit pattern exactly', () => {
    for (let bits = 0; bits < 0x10000; bits++) {
      const h = f16BitsToF32(bits);
      if (!Number.isNaN(h)) expect(f32ToF16Bits(h)).toBe(bits);
      const b = bf16BitsToF32(bits);
      if (!Number.isNaN(b)) expect(f32ToBf16Bits(b)).toBe(bits);
    }
  });

  it('decodes f16 subnormals and specials', () => {
    expect(f16BitsToF32(1)).toBe(2 ** -24);
    expect(f16BitsToF32(0x3ff)).toBe(1023 * 2 ** -24);
    expect(f16BitsToF32(0x7bff)).toBe(65504);
    expect(f16BitsToF32(0xfc00)).toBe(Number.NEGATIVE_INFINITY);
  });

  it('rounds as storing would, per dtype', () => {
    expect(roundToDType(0.1, 'f32')).toBe(Math.fround(0.1));
    expect(roundToDType(0.1, 'f64')).toBe(0.1);
    expect(roundToDType(-2.7, 'i32')).toBe(-2);
    expect(roundToDType(1.00146484375, 'f16')).toBe(1.001953125);
    expect(roundToDType(2051, 'bf16')).toBe(2048);
  });
});
