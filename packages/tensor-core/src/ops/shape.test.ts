import { expect, it } from 'vitest';
import { ArgumentError, ShapeError } from '../errors.js';
import { describeBackends } from '../testing/index.js';
import { stridesOf, unravel } from '../testing/reference.js';
import { arange, tensor } from './creation.js';
import {
  broadcastTo,
  chunk,
  concat,
  expand,
  flatten,
  narrow,
  permute,
  reshape,
  slice,
  split,
  squeeze,
  transpose,
  unsqueeze,
  view,
} from './shape.js';

function range(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}

describeBackends('shape ops', (ctx) => {
  const b = () => ({ backend: ctx.backend });

  it('reshape and view share storage and infer -1', async () => {
    const x = tensor(range(12), { ...b(), shape: [3, 4] });
    const r = reshape(x, [2, -1, 3]);
    expect(r.shape).toEqual([2, 2, 3]);
    expect(r.storage()).toBe(x.storage());
    x.write(range(12).map((v) => v * 10));
    expect([...(await r.read())]).toEqual(range(12).map((v) => v * 10));
    expect(view(x, [12]).shape).toEqual([12]);
    expect(flatten(tensor(range(24), { ...b(), shape: [2, 3, 4] }), 1).shape).toEqual([2, 12]);
    expect(unsqueeze(x, -1).shape).toEqual([3, 4, 1]);
    expect(unsqueeze(x, 0).shape).toEqual([1, 3, 4]);
    expect(squeeze(tensor(range(3), { ...b(), shape: [1, 3, 1] })).shape).toEqual([3]);
    expect(squeeze(tensor(range(3), { ...b(), shape: [1, 3, 1] }), [0, 1]).shape).toEqual([3, 1]);
    expect(() => reshape(x, [5, -1])).toThrow('[reshape] cannot infer -1 for 12 elements');
    expect(() => reshape(x, [5])).toThrow(ShapeError);
  });

  it('permute and transpose match index arithmetic on a prime-sized tensor', async () => {
    const shape = [2, 3, 5, 7];
    const x = tensor(range(210), { ...b(), shape });
    const dims = [2, 0, 3, 1];
    const p = permute(x, dims);
    const outShape = dims.map((d) => shape[d]!);
    expect(p.shape).toEqual(outShape);
    const inStrides = stridesOf(shape);
    const expected = range(210).map((flat) => {
      const idx = unravel(flat, outShape);
      return idx.reduce((acc, v, i) => acc + v * inStrides[dims[i]!]!, 0);
    });
    expect([...(await p.read())]).toEqual(expected);
    const t = transpose(tensor(range(6), { ...b(), shape: [2, 3] }));
    expect(t.shape).toEqual([3, 2]);
    expect([...(await t.read())]).toEqual([0, 3, 1, 4, 2, 5]);
    expect(() => permute(x, [0, 0, 1, 2])).toThrow('[permute] dims [0, 0, 1, 2] repeat an axis');
  });

  it('slice follows Python slicing (negative bounds, steps, clamping)', async () => {
    const x = tensor(range(35), { ...b(), shape: [5, 7] });
    const s = slice(x, [
      { start: 1, end: -1, step: 2 },
      { start: -5, step: 3 },
    ]);
    expect(s.shape).toEqual([2, 2]);
    expect([...(await s.read())]).toEqual([7 + 2, 7 + 5, 21 + 2, 21 + 5]);
    const all = slice(x, [null, { start: 3, end: 100 }]);
    expect(all.shape).toEqual([5, 4]);
    expect(slice(x, [{ start: 4, end: 2 }]).shape).toEqual([0, 7]);
    expect(() => slice(x, [{ step: 0 }])).toThrow(ArgumentError);
    expect(() => slice(x, [{ step: 0 }])).toThrow(
      '[slice] axis 0: step 0 must be a positive integer',
    );
  });

  it('narrow, split and chunk cut an axis', async () => {
    const x = tensor(range(22), { ...b(), shape: [2, 11] });
    expect([...(await narrow(x, 1, 9, 2).read())]).toEqual([9, 10, 20, 21]);
    const parts = split(x, 4, 1);
    expect(parts.map((p) => p.shape)).toEqual([
      [2, 4],
      [2, 4],
      [2, 3],
    ]);
    expect([...(await parts[2]!.read())]).toEqual([8, 9, 10, 19, 20, 21]);
    expect(split(x, [1, 10], -1).map((p) => p.shape[1])).toEqual([1, 10]);
    expect(chunk(x, 3, 1).map((p) => p.shape[1])).toEqual([4, 4, 3]);
    expect(chunk(x, 5, 0).length).toBe(2);
    expect(() => narrow(x, 1, 10, 2)).toThrow(
      '[narrow] start 10 and length 2 do not fit axis 1 of size 11',
    );
    expect(() => split(x, [3, 3], 1)).toThrow('[split] sizes [3, 3] do not sum to 11 on axis 1');
  });

  it('concat joins along any axis, including zero-size parts', async () => {
    const a = tensor(range(6), { ...b(), shape: [2, 3] });
    const c = tensor([100, 101], { ...b(), shape: [2, 1] });
    const e = tensor([], { ...b(), shape: [2, 0] });
    const y = concat([a, e, c], 1);
    expect(y.shape).toEqual([2, 4]);
    expect([...(await y.read())]).toEqual([0, 1, 2, 100, 3, 4, 5, 101]);
    const z = concat([a, a], -2);
    expect([...(await z.read())]).toEqual([...range(6), ...range(6)]);
    expect(() => concat([a, c], 0)).toThrow('[concat] shapes differ outside axis 0');
    const h = tensor([1, 2, 3], { ...b(), dtype: 'f16', shape: [1, 3] });
    expect(() => concat([a, h], 0)).toThrow(/^\[concat\] operands must share a dtype/);
  });

  it('expand broadcasts size-1 and new leading dims', async () => {
    const x = tensor([1, 2, 3], { ...b(), shape: [3, 1] });
    const y = expand(x, [2, -1, 4]);
    expect(y.shape).toEqual([2, 3, 4]);
    expect([...(await y.read())]).toEqual([
      1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,
    ]);
    expect(broadcastTo(x, [3, 0]).shape).toEqual([3, 0]);
    expect(() => expand(x, [2, 4])).toThrow('[expand] dimension 0 cannot expand 3 to 2');
  });

  it('moves f16 and i32 bits through permute and concat unchanged', async () => {
    const h = tensor([0.1, -2.5, 65504, 6e-8], { ...b(), dtype: 'f16', shape: [2, 2] });
    const raw = await h.readRaw();
    const t = await transpose(h).readRaw();
    expect([...t]).toEqual([raw[0], raw[2], raw[1], raw[3]]);
    const i = tensor(new Int32Array([2147483647, -2147483648]), { ...b() });
    expect([...(await concat([i, i]).read())]).toEqual([
      2147483647, -2147483648, 2147483647, -2147483648,
    ]);
  });

  it('arange builds integer and fractional ranges', async () => {
    expect([...(await arange(5, undefined, 1, b()).read())]).toEqual([0, 1, 2, 3, 4]);
    expect(arange(5, undefined, 1, b()).dtype).toBe('i32');
    expectArray(await arange(1, 2, 0.25, b()).read(), [1, 1.25, 1.5, 1.75]);
    expect(arange(3, 1, 1, b()).shape).toEqual([0]);
  });
});

function expectArray(actual: ArrayLike<number>, expected: number[]): void {
  expect(Array.from(actual)).toEqual(expected);
}
