import { expect, it } from 'vitest';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../dtype-convert.js';
import type { HostArray } from '../dtype.js';
import { ShapeError } from '../errors.js';
import { Tensor } from '../tensor.js';
import { describeBackends } from '../testing/index.js';
import { cast, clone, copy_, fill_ } from './cast.js';
import { tensor } from './creation.js';

// Halfway cases, subnormals, overflow, signed zero, NaN and infinities.
const edgeValues = [
  0,
  -0,
  1,
  -1,
  1 + 2 ** -11,
  1 + 3 * 2 ** -11,
  65504,
  65520,
  1e6,
  2 ** -24,
  2 ** -25,
  3 * 2 ** -26,
  6.1e-5,
  1 + 2 ** -8,
  1 + 3 * 2 ** -8,
  3.4e38,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
  0.1,
  -2.7,
  1234.5678,
];

const I32_MAX = 2147483647;
const I32_MIN = -2147483648;
const CAST_DTYPES = ['f32', 'f16', 'bf16', 'i32'] as const;
type CastDType = (typeof CAST_DTYPES)[number];

/** Source values per dtype (already representable in it): ties, overflow, subnormals, NaN. */
const castSources: Record<CastDType, number[]> = {
  f32: [...edgeValues, Number.NaN, 2147483520, 2 ** 31, -2147483904, 3e9, -3e9, -0.5, 2.9].map(
    Math.fround,
  ),
  f16: [
    0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0x3c01, 0x3555, 0x7bff, 0xfbff, 0x7c00, 0xfc00,
    0x7e00, 0xc5a0, 0x4248,
  ].map(f16BitsToF32),
  bf16: [
    0x0000, 0x8000, 0x0001, 0x3f81, 0x3f80, 0x3380, 0x3370, 0x477f, 0x4780, 0x4f00, 0x4eff, 0xcf00,
    0xcf01, 0x7f80, 0xff80, 0x7fc0, 0xc02e, 0x447a, 0x3dcd,
  ].map(bf16BitsToF32),
  i32: [
    0,
    1,
    -1,
    257,
    259,
    2049,
    2051,
    65504,
    65519,
    65520,
    -65536,
    16777217,
    16777218,
    16777219,
    33554435,
    -123456789,
    I32_MAX,
    I32_MIN,
  ],
};

/** `values` in `dtype`'s storage format (raw bits for f16 and bf16). */
function rawOf(values: readonly number[], dtype: CastDType): HostArray {
  switch (dtype) {
    case 'f32':
      return Float32Array.from(values);
    case 'i32':
      return Int32Array.from(values);
    case 'f16':
      return Uint16Array.from(values, f32ToF16Bits);
    case 'bf16':
      return Uint16Array.from(values, f32ToBf16Bits);
  }
}

/**
 * The stored result of casting `value` (exactly representable in its source dtype) to `to`, as
 * [Note: cast semantics] defines it: a raw element of `to`'s host array.
 */
function castReference(value: number, to: CastDType): number {
  if (to === 'i32') {
    if (Number.isNaN(value)) return 0;
    return Math.min(I32_MAX, Math.max(I32_MIN, Math.trunc(value))) + 0; // no -0 in i32
  }
  const f32 = Math.fround(value); // exact for floats; i32 rounds to nearest even here
  if (to === 'f32') return f32;
  return to === 'f16' ? f32ToF16Bits(f32) : f32ToBf16Bits(f32);
}

/** Bit equality, except that any NaN matches any NaN (sign and payload are unspecified). */
function sameBits(got: number[], want: number[], dtype: CastDType): boolean {
  if (got.length !== want.length) return false;
  const isNaNBits = (v: number) =>
    dtype === 'f32'
      ? Number.isNaN(v)
      : dtype === 'f16'
        ? (v & 0x7c00) === 0x7c00 && (v & 0x3ff) !== 0
        : dtype === 'bf16'
          ? (v & 0x7f80) === 0x7f80 && (v & 0x7f) !== 0
          : false;
  return got.every((g, k) => {
    const w = want[k]!;
    if (isNaNBits(w)) return isNaNBits(g);
    return Object.is(g, w);
  });
}

describeBackends('cast', (ctx) => {
  it('f32 -> f16 and bf16 are bit-exact round-to-nearest-even', async () => {
    const x = tensor(edgeValues, { backend: ctx.backend });
    const f32 = await x.read();
    const h = cast(x, 'f16');
    expect([...(await h.readRaw())]).toEqual([...f32].map(f32ToF16Bits));
    const b = cast(x, 'bf16');
    expect([...(await b.readRaw())]).toEqual([...f32].map(f32ToBf16Bits));
    const nan = await cast(tensor([Number.NaN], { backend: ctx.backend }), 'f16').read();
    expect(Number.isNaN(nan[0]!)).toBe(true);
  });

  it('f16 and bf16 -> f32 are exact, and f16 -> bf16 rounds once', async () => {
    const bits = [0x0000, 0x8000, 0x0001, 0x03ff, 0x3c00, 0x7bff, 0xfc00, 0x3555];
    const h = tensor(new Uint16Array(bits), { dtype: 'f16', backend: ctx.backend, shape: [8] });
    expect([...(await cast(h, 'f32').read())]).toEqual(bits.map(f16BitsToF32));
    const b = tensor(new Uint16Array(bits), { dtype: 'bf16', backend: ctx.backend, shape: [8] });
    expect([...(await cast(b, 'f32').read())]).toEqual(bits.map(bf16BitsToF32));
    expect([...(await cast(h, 'bf16').readRaw())]).toEqual(
      bits.map((v) => f32ToBf16Bits(f16BitsToF32(v))),
    );
  });

  it('float -> i32 truncates toward zero and i32 -> f32 rounds to nearest', async () => {
    const x = tensor([2.9, -2.9, 0.5, -0.5, 1e9], { backend: ctx.backend });
    expect([...(await cast(x, 'i32').read())]).toEqual([2, -2, 0, 0, 1000000000]);
    const i = tensor(new Int32Array([16777217, -3, 2147483647]), { backend: ctx.backend });
    expect([...(await cast(i, 'f32').read())]).toEqual([16777216, -3, 2147483648]);
  });

  it('float -> i32 saturates out of range and gives 0 for NaN, from every float dtype', async () => {
    const values = [
      Number.NaN,
      Number.POSITIVE_INFINITY,
      Number.NEGATIVE_INFINITY,
      2 ** 31,
      2147483520,
      -(2 ** 31),
      -2147483904,
      3e9,
      -3e9,
      65504,
      -1.5,
    ];
    const want: Record<'f32' | 'f16' | 'bf16', number[]> = {
      f32: [
        0,
        I32_MAX,
        I32_MIN,
        I32_MAX,
        2147483520,
        I32_MIN,
        I32_MIN,
        I32_MAX,
        I32_MIN,
        65504,
        -1,
      ],
      // f16: everything past 65504 is inf.
      f16: [0, I32_MAX, I32_MIN, I32_MAX, I32_MAX, I32_MIN, I32_MIN, I32_MAX, I32_MIN, 65504, -1],
      // bf16: 2147483520 rounds to 2^31, -2147483904 to -2^31.
      bf16: [0, I32_MAX, I32_MIN, I32_MAX, I32_MAX, I32_MIN, I32_MIN, I32_MAX, I32_MIN, 65536, -1],
    };
    for (const dtype of ['f32', 'f16', 'bf16'] as const) {
      const x = tensor(values, { dtype, backend: ctx.backend });
      expect([...(await cast(x, 'i32').read())], dtype).toEqual(want[dtype]);
    }
  });

  it('i32 -> f16 and bf16 round through f32 to nearest even', async () => {
    const values = [
      0,
      1,
      -1,
      257,
      259,
      2049,
      2051,
      65519,
      65520,
      -65536,
      16777219,
      I32_MAX,
      I32_MIN,
    ];
    const i = tensor(new Int32Array(values), { backend: ctx.backend });
    expect([...(await cast(i, 'f16').read())]).toEqual([
      0,
      1,
      -1,
      257,
      259,
      2048,
      2052,
      65504,
      Number.POSITIVE_INFINITY,
      Number.NEGATIVE_INFINITY,
      Number.POSITIVE_INFINITY,
      Number.POSITIVE_INFINITY,
      Number.NEGATIVE_INFINITY,
    ]);
    expect([...(await cast(i, 'bf16').read())]).toEqual([
      0,
      1,
      -1,
      256,
      260,
      2048,
      2048,
      65536,
      65536,
      -65536,
      16777216,
      2 ** 31,
      -(2 ** 31),
    ]);
  });

  it('every pair of f32, f16, bf16 and i32 matches the reference bit for bit, from a view', async () => {
    for (const from of CAST_DTYPES) {
      const source = castSources[from];
      const raw = rawOf(source, from);
      // A view at an odd element offset inside a larger buffer (packed halves on WebGPU).
      const flat = Tensor.empty(ctx.backend, [raw.length + 3], from);
      const x = flat.view([raw.length], 1).write(raw);
      for (const to of CAST_DTYPES) {
        const got = await cast(x, to).readRaw();
        const want = source.map((v) => castReference(v, to));
        expect(sameBits([...got], want, to), `${from} -> ${to}: got ${[...got]}`).toBe(true);
      }
    }
  });

  it('clone copies into new storage; copy_ converts; fill_ overwrites', async () => {
    const x = tensor([1, 2, 3], { backend: ctx.backend });
    const y = clone(x);
    expect(y.storage()).not.toBe(x.storage());
    x.write([7, 8, 9]);
    expect([...(await y.read())]).toEqual([1, 2, 3]);
    const h = tensor([0, 0, 0], { dtype: 'f16', backend: ctx.backend });
    copy_(h, tensor([0.1, 0.2, 0.3], { backend: ctx.backend }));
    expect([...(await h.readRaw())]).toEqual([0.1, 0.2, 0.3].map((v) => f32ToF16Bits(v)));
    fill_(x, -1.5);
    expect([...(await x.read())]).toEqual([-1.5, -1.5, -1.5]);
    expect(() => copy_(x, tensor([1], { backend: ctx.backend }))).toThrow(ShapeError);
  });
});
