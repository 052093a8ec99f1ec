import { expect, it } from 'vitest';
import { createCpuBackend } from '../runtime.js';
import type { DType } from '../dtype.js';
import { BackendError, DTypeError, FreedTensorError, ShapeError } from '../errors.js';
import { ClosenessError, describeBackends, expectClose, toleranceFor } from '../testing/index.js';
import { broadcastReference, roundValues, seededValues } from '../testing/reference.js';
import { Tensor } from '../tensor.js';
import { tensor } from './creation.js';
import * as ops from './elementwise.js';

function erf(x: number): number {
  // Float64 reference by numerically integrating 2/sqrt(pi) exp(-t^2) (Simpson, 2000 steps).
  const steps = 2000;
  const h = x / steps;
  let acc = 0;
  for (let i = 0; i <= steps; i++) {
    const w = i === 0 || i === steps ? 1 : i % 2 === 1 ? 4 : 2;
    acc += w * Math.exp(-((i * h) ** 2));
  }
  return ((acc * h) / 3) * (2 / Math.sqrt(Math.PI));
}

const unaryCases: [string, (x: Tensor) => Tensor, (x: number) => number, number, number][] = [
  ['neg', ops.neg, (x) => -x, -3, 3],
  ['abs', ops.abs, Math.abs, -3, 3],
  ['exp', ops.exp, Math.exp, -3, 3],
  ['log', ops.log, Math.log, 0.01, 5],
  ['sqrt', ops.sqrt, Math.sqrt, 0, 5],
  ['rsqrt', ops.rsqrt, (x) => 1 / Math.sqrt(x), 0.05, 5],
  ['tanh', ops.tanh, Math.tanh, -4, 4],
  ['sigmoid', ops.sigmoid, (x) => 1 / (1 + Math.exp(-x)), -8, 8],
  ['relu', ops.relu, (x) => Math.max(0, x), -3, 3],
  ['square', ops.square, (x) => x * x, -3, 3],
  ['reciprocal', ops.reciprocal, (x) => 1 / x, 0.1, 3],
  ['gelu', (x) => ops.gelu(x), (x) => 0.5 * x * (1 + erf(x / Math.SQRT2)), -5, 5],
  [
    'gelu tanh',
    (x) => ops.gelu(x, { approximate: 'tanh' }),
    (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3))),
    -5,
    5,
  ],
];

describeBackends('unary ops', (ctx) => {
  for (const [name, op, ref, low, high] of unaryCases) {
    it(`${name} matches a float64 reference in every float dtype`, async () => {
      for (const dtype of ctx.floatDTypes) {
        const data = roundValues(seededValues(37, name.length, low, high), dtype);
        const x = tensor(data, { dtype, backend: ctx.backend, shape: [37] });
        const y = op(x);
        expect(y.dtype).toBe(dtype);
        expect(y.shape).toEqual([37]);
        // f64: the erf reference is itself a quadrature, good to ~1e-12.
        const tol = dtype === 'f64' ? { rtol: 1e-10, atol: 1e-10 } : toleranceFor(dtype);
        expectClose(await y.read(), data.map(ref), tol);
      }
    });
  }

  it('keeps shapes of size 1, zero-size and rank 0', async () => {
    const scalar = tensor(-2, { backend: ctx.backend });
    expect(scalar.shape).toEqual([]);
    expect([...(await ops.abs(scalar).read())]).toEqual([2]);
    const emptyT = tensor([], { backend: ctx.backend, shape: [0, 3] });
    expect(ops.exp(emptyT).shape).toEqual([0, 3]);
  });

  it('supports neg, abs and square on i32 and rejects exp', async () => {
    const x = tensor(new Int32Array([-3, 0, 7]), { backend: ctx.backend });
    expect([...(await ops.neg(x).read())]).toEqual([3, 0, -7]);
    expect([...(await ops.square(x).read())]).toEqual([9, 0, 49]);
    expect(() => ops.exp(x)).toThrow(DTypeError);
    expect(() => ops.exp(x)).toThrow(/^\[exp\] needs a floating point tensor/);
  });
});

const binaryCases: [
  string,
  (a: Tensor | number, b: Tensor | number) => Tensor,
  (a: number, b: number) => number,
][] = [
  ['add', ops.add, (a, b) => a + b],
  ['sub', ops.sub, (a, b) => a - b],
  ['mul', ops.mul, (a, b) => a * b],
  ['div', ops.div, (a, b) => a / b],
  ['maximum', ops.maximum, Math.max],
  ['minimum', ops.minimum, Math.min],
];

const broadcastShapes: [number[], number[], number[]][] = [
  [[7], [7], [7]],
  [[3, 5], [5], [3, 5]],
  [
    [3, 1],
    [1, 13],
    [3, 13],
  ],
  [
    [2, 1, 5],
    [3, 1],
    [2, 3, 5],
  ],
  [[1], [4, 17], [4, 17]],
  [[], [2, 3], [2, 3]],
  [[0, 3], [3], [0, 3]],
];

describeBackends('binary ops', (ctx) => {
  it('writes in place over its first operand (out = a, as mul_), with the bits of out of place', async () => {
    const { backend } = ctx;
    // On the CPU past the WASM kernels' piece (8 Mi floats of 2 arrays), so pieces alias too.
    for (const n of ctx.kind === 'cpu' ? [1000, 2 ** 23 + 12] : [1000, 70_000]) {
      const values = Float32Array.from({ length: n }, (_, i) => Math.sin(i) * 3);
      const a = tensor(values, { backend, shape: [n] });
      const b = tensor(
        values.map((v) => v / 7 + 0.5),
        { backend, shape: [n] },
      );
      const bytes = async (t: Tensor) => Buffer.from((await t.readRaw()).buffer);
      const scaled = ops.mul(a, 0.37);
      backend.binary('mul', a.kernel('test'), 0.37, a.kernel('test'));
      expect((await bytes(a)).equals(await bytes(scaled))).toBe(true);
      const summed = ops.add(a, b);
      backend.binary('add', a.kernel('test'), b.kernel('test'), a.kernel('test'));
      expect((await bytes(a)).equals(await bytes(summed))).toBe(true);
      const before = Float32Array.from(await b.read());
      expect(Buffer.from((await b.readRaw()).buffer).equals(Buffer.from(before.buffer))).toBe(true);
      for (const t of [a, b, scaled, summed]) t.free();
    }
  });

  for (const [name, op, ref] of binaryCases) {
    it(`${name} broadcasts like NumPy`, async () => {
      for (const [sa, sb, so] of broadcastShapes) {
        const na = sa.reduce((p, d) => p * d, 1);
        const nb = sb.reduce((p, d) => p * d, 1);
        const av = roundValues(seededValues(na, 1, 0.5, 3), 'f32');
        const bv = roundValues(seededValues(nb, 2, 0.5, 3), 'f32');
        const a = tensor(av, { backend: ctx.backend, shape: sa });
        const b = tensor(bv, { backend: ctx.backend, shape: sb });
        const y = op(a, b);
        expect(y.shape).toEqual(so);
        expectClose(await y.read(), broadcastReference([sa, sb], [av, bv], so, ref));
      }
    });

    it(`${name} takes a number on either side and rounds in f16/bf16`, async () => {
      for (const dtype of ['f16', 'bf16', 'f32'] as DType[]) {
        const av = roundValues(seededValues(11, 3, 0.5, 3), dtype);
        const a = tensor(av, { dtype, backend: ctx.backend, shape: [11] });
        expectClose(
          await op(a, 1.5).read(),
          av.map((v) => ref(v, 1.5)),
          toleranceFor(dtype),
        );
        expectClose(
          await op(2.5, a).read(),
          av.map((v) => ref(2.5, v)),
          toleranceFor(dtype),
        );
      }
    });
  }

  it('pow matches Math.pow for tensor and number exponents', async () => {
    const base = roundValues(seededValues(9, 4, 0.1, 3), 'f32');
    const exps = roundValues(seededValues(9, 5, -2, 2), 'f32');
    const a = tensor(base, { backend: ctx.backend });
    const b = tensor(exps, { backend: ctx.backend });
    expectClose(
      await ops.pow(a, b).read(),
      base.map((v, i) => v ** exps[i]!),
    );
    expectClose(
      await ops.pow(a, 2).read(),
      base.map((v) => v ** 2),
    );
  });

  it('comparisons write 1/0 in the input dtype, with broadcasting', async () => {
    const a = tensor([[1, 2, 3]], { backend: ctx.backend });
    const b = tensor([[2], [1]], { backend: ctx.backend });
    const cases: [(x: Tensor, y: Tensor) => Tensor, number[]][] = [
      [ops.eq, [0, 1, 0, 1, 0, 0]],
      [ops.ne, [1, 0, 1, 0, 1, 1]],
      [ops.lt, [1, 0, 0, 0, 0, 0]],
      [ops.le, [1, 1, 0, 1, 0, 0]],
      [ops.gt, [0, 0, 1, 0, 1, 1]],
      [ops.ge, [0, 1, 1, 1, 1, 1]],
    ];
    for (const [op, expected] of cases) {
      const y = op(a, b);
      expect(y.dtype).toBe('f32');
      expect(y.shape).toEqual([2, 3]);
      expect([...(await y.read())]).toEqual(expected);
    }
    const i = tensor(new Int32Array([1, 5]), { backend: ctx.backend });
    const gt = ops.gt(i, 2);
    expect(gt.dtype).toBe('i32');
    expect([...(await gt.read())]).toEqual([0, 1]);
  });

  it('i32 add/sub/mul wrap like int32 and div is rejected', async () => {
    const a = tensor(new Int32Array([2147483647, -7, 65536]), { backend: ctx.backend });
    expect([...(await ops.add(a, 1).read())]).toEqual([-2147483648, -6, 65537]);
    expect([...(await ops.mul(a, 65536).read())]).toEqual([-65536, -458752, 0]);
    expect(() => ops.div(a, 2)).toThrow(/^\[div\] is not defined for i32 tensors/);
  });

  it('where and maskedFill broadcast cond, a and b', async () => {
    const cond = tensor([[1], [0]], { backend: ctx.backend });
    const a = tensor([1, 2, 3], { backend: ctx.backend });
    const b = tensor(
      [
        [10, 20, 30],
        [40, 50, 60],
      ],
      { backend: ctx.backend },
    );
    expect([...(await ops.where(cond, a, b).read())]).toEqual([1, 2, 3, 40, 50, 60]);
    expect([...(await ops.where(cond, a, -1).read())]).toEqual([1, 2, 3, -1, -1, -1]);
    const mask = tensor([0, 1, 0], { backend: ctx.backend });
    expect([...(await ops.maskedFill(b, mask, -9).read())]).toEqual([10, -9, 30, 40, -9, 60]);
  });

  it("activationGrad computes dy * f'(x)", async () => {
    const xv = roundValues(seededValues(13, 6, -3, 3), 'f32');
    const dyv = roundValues(seededValues(13, 7, -1, 1), 'f32');
    const x = tensor(xv, { backend: ctx.backend });
    const dy = tensor(dyv, { backend: ctx.backend });
    expectClose(
      await ops.activationGrad('relu', x, dy).read(),
      xv.map((v, i) => (v > 0 ? dyv[i]! : 0)),
    );
    const h = 1e-4;
    const gelu = (v: number) => 0.5 * v * (1 + erf(v / Math.SQRT2));
    expectClose(
      await ops.activationGrad('gelu', x, dy).read(),
      xv.map((v, i) => (dyv[i]! * (gelu(v + h) - gelu(v - h))) / (2 * h)),
      { rtol: 1e-4, atol: 1e-5 },
    );
  });

  it('rejects shapes that do not broadcast, mixed dtypes and freed tensors', () => {
    const a = tensor([1, 2, 3], { backend: ctx.backend });
    const b = tensor([1, 2], { backend: ctx.backend });
    expect(() => ops.add(a, b)).toThrow(ShapeError);
    expect(() => ops.add(a, b)).toThrow(
      '[add] shapes do not broadcast at dimension 0 (shapes [3] and [2])',
    );
    const h = tensor([1, 2, 3], { dtype: 'f16', backend: ctx.backend });
    expect(() => ops.mul(a, h)).toThrow(DTypeError);
    expect(() => ops.mul(a, h)).toThrow(
      '[mul] operands must share a dtype (cast one first) (dtypes f32, f16)',
    );
    const freed = tensor([1], { backend: ctx.backend });
    freed.name = 'w';
    freed.free();
    expect(() => ops.exp(freed)).toThrow(FreedTensorError);
    expect(() => ops.exp(freed)).toThrow("[exp] tensor 'w' was used after its storage was freed");
    expect(() => ops.gelu(a, { approximate: 'fast' as never })).toThrow(
      "[gelu] approximate must be 'none' or 'tanh', got 'fast'",
    );
  });

  it('rejects tensors on two backends', () => {
    const other = createCpuBackend();
    const a = tensor([1], { backend: ctx.backend });
    const b = tensor([1], { backend: other });
    expect(() => ops.add(a, b)).toThrow(BackendError);
    expect(() => ops.add(a, b)).toThrow(/^\[add\] operands are on two backends/);
  });
});

describeBackends('elementwise ops across workgroups', (ctx) => {
  // WebGPU runs 64 invocations per workgroup, one per element (one per u32 word for f16/bf16).
  const sizes = [1, 37, 64 * 3 + 1, 10007];
  const cases = unaryCases.filter(([name]) => ['neg', 'exp', 'tanh', 'relu'].includes(name));

  it('unary ops on sizes that end inside a workgroup, read from a view at an odd offset', async () => {
    for (const [name, op, ref, low, high] of cases) {
      for (const dtype of ctx.floatDTypes) {
        for (const size of sizes) {
          const data = roundValues(seededValues(size, size + name.length, low, high), dtype);
          const flat = Tensor.empty(ctx.backend, [size + 2], dtype);
          const x = flat.view([size], 1).write(data);
          try {
            expectClose(await op(x).read(), data.map(ref), toleranceFor(dtype));
          } catch (error) {
            throw new ClosenessError(`${name} ${dtype} size ${size}: ${(error as Error).message}`);
          }
        }
      }
    }
  });

  it('runs past 65535 workgroups (the dispatch spills into y)', async () => {
    // 65535 * 64 invocations is the most one dispatch row holds: go past it by a partial group.
    const n = 65535 * 64 + 4097;
    const x = tensor(
      Float32Array.from({ length: n }, (_, i) => (i % 4099) - 2000),
      { backend: ctx.backend, shape: [n] },
    );
    const negated = await ops.neg(x).read();
    let bad = 0;
    for (let i = 0; i < n; i++) if (negated[i] !== 2000 - (i % 4099)) bad++;
    expect(bad, 'wrong elements of neg').toBe(0);
    x.free();

    // A broadcast binary op over a [4097, 1025] grid (4,199,425 elements).
    const rows = 4097;
    const cols = 1025;
    const a = tensor(
      Float32Array.from({ length: rows * cols }, (_, i) => i % 1000),
      { backend: ctx.backend, shape: [rows, cols] },
    );
    const b = tensor(
      Float32Array.from({ length: cols }, (_, j) => j * 0.5),
      { backend: ctx.backend, shape: [cols] },
    );
    const sum = await ops.add(a, b).read();
    bad = 0;
    for (let i = 0; i < rows * cols; i++) if (sum[i] !== (i % 1000) + (i % cols) * 0.5) bad++;
    expect(bad, 'wrong elements of add').toBe(0);
    a.free();

    // bf16 runs one invocation per word: twice the elements to spill.
    const m = 2 * 65535 * 64 + 4099;
    const bits = Uint16Array.from({ length: m }, (_, i) => 0x3f80 + (i % 127));
    const h = tensor(bits, { dtype: 'bf16', backend: ctx.backend, shape: [m] });
    const raw = await ops.neg(h).readRaw();
    bad = 0;
    for (let i = 0; i < m; i++) if (raw[i] !== (bits[i]! ^ 0x8000)) bad++;
    expect(bad, 'wrong elements of bf16 neg').toBe(0);
    h.free();
  });
});
