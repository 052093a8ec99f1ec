import { expect, it } from 'vitest';
import { DTypeError, ShapeError } from '../errors.js';
import { describeBackends, expectClose, toleranceFor } from '../testing/index.js';
import { roundValues, seededValues, stridesOf, unravel } from '../testing/reference.js';
import { tensor } from './creation.js';
import { argmax, max, mean, min, sum } from './reduce.js';

/** Float64 reference reduction of `values` [shape] over `axes`. */
function reduceReference(
  values: readonly number[],
  shape: readonly number[],
  axes: readonly number[],
  init: number,
  combine: (acc: number, v: number) => number,
): { shape: number[]; values: number[] } {
  const outShape = shape.map((d, i) => (axes.includes(i) ? 1 : d));
  const strides = stridesOf(outShape);
  const size = outShape.reduce((p, d) => p * d, 1);
  const out = new Array<number>(size).fill(init);
  values.forEach((v, flat) => {
    const index = unravel(flat, shape);
    const o = index.reduce((p, x, i) => p + (axes.includes(i) ? 0 : x) * strides[i]!, 0);
    out[o] = combine(out[o]!, v);
  });
  return { shape: outShape, values: out };
}

const cases: [number[], number | number[] | undefined, number[]][] = [
  [[7], 0, [0]],
  [[3, 5], 1, [1]],
  [[3, 5], -2, [0]],
  [
    [2, 3, 5],
    [0, 2],
    [0, 2],
  ],
  [[4, 1, 13], undefined, [0, 1, 2]],
  [
    [2, 17, 3],
    [-1, 1],
    [1, 2],
  ],
];

describeBackends('reductions', (ctx) => {
  it('sum, mean, max and min match float64 references over one or several axes', async () => {
    for (const [shape, axes, normalized] of cases) {
      const n = shape.reduce((p, d) => p * d, 1);
      const data = roundValues(seededValues(n, n), 'f32');
      const x = tensor(data, { backend: ctx.backend, shape });
      const s = reduceReference(data, shape, normalized, 0, (a, v) => a + v);
      const mx = reduceReference(data, shape, normalized, -Infinity, Math.max);
      const mn = reduceReference(data, shape, normalized, Infinity, Math.min);
      const count = normalized.reduce((p, a) => p * shape[a]!, 1);
      const dropped = shape.filter((_, i) => !normalized.includes(i));
      const sumT = sum(x, axes);
      expect(sumT.shape).toEqual(dropped);
      expectClose(await sumT.read(), s.values);
      const meanT = mean(x, axes, { keepDim: true });
      expect(meanT.shape).toEqual(s.shape);
      expectClose(
        await meanT.read(),
        s.values.map((v) => v / count),
      );
      expect([...(await max(x, axes).read())]).toEqual(mx.values.map(Math.fround));
      expect([...(await min(x, axes, { keepDim: true }).read())]).toEqual(
        mn.values.map(Math.fround),
      );
    }
  });

  it('reduces f16 and bf16 with per-dtype tolerance', async () => {
    for (const dtype of ['f16', 'bf16'] as const) {
      const data = roundValues(seededValues(3 * 29, 8), dtype);
      const x = tensor(data, { dtype, backend: ctx.backend, shape: [3, 29] });
      const ref = reduceReference(data, [3, 29], [1], 0, (a, v) => a + v);
      const out = sum(x, 1);
      expect(out.dtype).toBe(dtype);
      expectClose(await out.read(), ref.values, { ...toleranceFor(dtype), atol: 0.05 });
    }
  });

  it('sums zero-size axes to 0, propagates NaN through max and sums i32 exactly', async () => {
    const empty = tensor([], { backend: ctx.backend, shape: [3, 0] });
    expect([...(await sum(empty, 1).read())]).toEqual([0, 0, 0]);
    const withNaN = tensor([1, Number.NaN, 3, 4], { backend: ctx.backend, shape: [2, 2] });
    const m = await max(withNaN, 1).read();
    expect(Number.isNaN(m[0]!)).toBe(true);
    expect(m[1]).toBe(4);
    const ints = tensor(new Int32Array([1, 2, 3, 4, 5, 6]), {
      backend: ctx.backend,
      shape: [2, 3],
    });
    const s = sum(ints, 0);
    expect(s.dtype).toBe('i32');
    expect([...(await s.read())]).toEqual([5, 7, 9]);
  });

  it('argmax returns the first maximum as i32', async () => {
    const x = tensor(
      [
        [1, 5, 5, 2],
        [7, 0, 7, 7],
        [-1, -3, -2, -1],
      ],
      { backend: ctx.backend },
    );
    const a = argmax(x, 1);
    expect(a.dtype).toBe('i32');
    expect([...(await a.read())]).toEqual([1, 0, 0]);
    expect([...(await argmax(x, 0, { keepDim: true }).read())]).toEqual([1, 0, 1, 1]);
    expect(argmax(x, 0, { keepDim: true }).shape).toEqual([1, 4]);
    expect(await argmax(x).item()).toBe(4);
  });

  it('rejects bad axes, max over an empty axis and mean of i32', () => {
    const x = tensor([[1, 2]], { backend: ctx.backend });
    expect(() => sum(x, 2)).toThrow(ShapeError);
    expect(() => sum(x, 2)).toThrow('[sum] axis 2 is out of range for rank 2 (shapes [1, 2])');
    expect(() => sum(x, [1, -1])).toThrow('[sum] axes [1, -1] repeat an axis');
    const empty = tensor([], { backend: ctx.backend, shape: [2, 0] });
    expect(() => max(empty, 1)).toThrow('[max] cannot reduce over an empty axis');
    const ints = tensor(new Int32Array([1]), { backend: ctx.backend });
    expect(() => mean(ints)).toThrow(DTypeError);
  });
});
