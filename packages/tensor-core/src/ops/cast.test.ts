import { expect, it } from 'vitest';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../dtype-convert.js';
import { ShapeError } from '../errors.js';
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
