import { describe, expect, it } from 'vitest';
import { BackendError, IndexError, OutOfMemoryError } from '../../errors.js';
import { crossEntropy, embedding } from '../../ops/nn.js';
import { tensor, zeros } from '../../ops/creation.js';
import { createCpuBackend } from '../../runtime.js';
import { Tensor } from '../../tensor.js';
import { expectClose } from '../../testing/tolerance.js';
import { matmulReference, roundValues, seededValues } from '../../testing/reference.js';

describe('CpuBackend matmul', () => {
  it('matches a float64 triple loop across the k and n block edges (TypeScript kernel)', async () => {
    // The TypeScript kernel sums in f64 and rounds once; the WASM kernel's f32 sums are tested
    // against an f32 reference in matmul-wasm.test.ts.
    const backend = createCpuBackend({ matmulKernel: 'typescript' });
    // k = 131 crosses two 64-wide k blocks with an odd tail; n = 517 crosses the 512-wide n block.
    for (const [m, k, n] of [
      [3, 131, 517],
      [67, 65, 5],
      [1, 1, 1025],
    ] as const) {
      const av = roundValues(seededValues(m * k, 5, -1, 1), 'f32');
      const bv = roundValues(seededValues(k * n, 6, -1, 1), 'f32');
      const out = Tensor.empty(backend, [1, m, n], 'f32');
      backend.matmul(
        tensor(av, { backend, shape: [1, m, k] }).kernel('t'),
        tensor(bv, { backend, shape: [1, k, n] }).kernel('t'),
        out.kernel('t'),
        false,
        false,
      );
      const expected = matmulReference(av, bv, m, k, n);
      expectClose(await out.read(), expected, { rtol: 1e-6, atol: 1e-6 });
    }
  });

  it('is exact in f64 and broadcasts a batch of 1', async () => {
    const backend = createCpuBackend();
    const [m, k, n] = [4, 9, 3];
    const av = seededValues(m * k, 1);
    const bv = seededValues(2 * k * n, 2);
    const out = Tensor.empty(backend, [2, m, n], 'f64');
    backend.matmul(
      tensor(av, { backend, dtype: 'f64', shape: [1, m, k] }).kernel('t'),
      tensor(bv, { backend, dtype: 'f64', shape: [2, k, n] }).kernel('t'),
      out.kernel('t'),
      false,
      false,
    );
    const expected = [
      ...matmulReference(av, bv.slice(0, k * n), m, k, n),
      ...matmulReference(av, bv.slice(k * n), m, k, n),
    ];
    expectClose(await out.read(), expected, { rtol: 1e-14, atol: 1e-14 });
  });
});

describe('CpuBackend memory', () => {
  it('accounts allocations through the caching allocator and reuses freed blocks', () => {
    const backend = createCpuBackend();
    const a = zeros([1000], { backend });
    expect(backend.memoryStats().allocated).toBe(4096);
    a.free();
    expect(backend.memoryStats().allocated).toBe(0);
    expect(backend.memoryStats().reserved).toBe(4096);
    const b = zeros([900], { backend });
    expect(backend.memoryStats().poolHits).toBe(1);
    b.free();
    backend.emptyCache();
    expect(backend.memoryStats().reserved).toBe(0);
  });

  it('throws OutOfMemoryError past the emulated limit', () => {
    const backend = createCpuBackend({ memoryLimit: 8192 });
    const a = zeros([1024], { backend });
    expect(() => zeros([2048], { backend })).toThrow(OutOfMemoryError);
    expect(() => zeros([2048], { backend })).toThrow(
      '[allocate] cpu out of memory: requested 8192 bytes with 4096 allocated and a limit of 8192',
    );
    a.free();
    backend.setMemoryLimit(undefined);
    expect(zeros([2048], { backend }).size).toBe(2048);
    expect(backend.memoryStats().peakAllocated).toBe(8192);
  });

  it('refuses work after dispose', async () => {
    const backend = createCpuBackend();
    const a = zeros([4], { backend });
    backend.dispose();
    expect(() => zeros([4], { backend })).toThrow(BackendError);
    expect(() => zeros([4], { backend })).toThrow('[allocate] the cpu backend was disposed');
    await expect(a.read()).rejects.toThrow('[read] the cpu backend was disposed');
  });
});

describe('CpuBackend kernels', () => {
  it('throws index errors at once, naming the position of the bad id', () => {
    const backend = createCpuBackend();
    const table = tensor(
      [
        [0, 1],
        [10, 11],
      ],
      { backend },
    );
    const bad = tensor(new Int32Array([0, 2]), { backend });
    expect(() => embedding(table, bad)).toThrow(IndexError);
    expect(() => embedding(table, bad)).toThrow(
      '[gather] index 2 is out of range [0, 2): indices[1]',
    );
    const logits = zeros([2, 3], { backend });
    expect(() => crossEntropy(logits, tensor(new Int32Array([1, -2]), { backend }))).toThrow(
      '[crossEntropy] index -2 is out of range [0, 3): targets[1]',
    );
    // The output allocated before the kernel threw is released again.
    expect(backend.memoryStats().allocations).toBe(4);
  });

  it('copyStrided writes a strided window (concat into the middle of a row)', async () => {
    const backend = createCpuBackend();
    const src = tensor([1, 2, 3, 4], { backend, shape: [2, 2] });
    const dst = zeros([2, 4], { backend });
    const s = src.kernel('t');
    const d = dst.kernel('t');
    backend.copyStrided(
      { storage: s.storage, offset: 0, dtype: 'f32', strides: [1, 2] },
      { storage: d.storage, offset: 1, dtype: 'f32', strides: [4, 1] },
      [2, 2],
    );
    expect([...(await dst.read())]).toEqual([0, 1, 3, 0, 0, 2, 4, 0]);
  });

  it('copyStrided permutes every rank from 1 to 5, at offsets, as an index walk does', async () => {
    const backend = createCpuBackend();
    for (const shape of [[7], [3, 5], [2, 3, 4], [2, 3, 4, 5], [2, 1, 3, 2, 3]]) {
      const rank = shape.length;
      const count = shape.reduce((x, y) => x * y, 1);
      // The source is the reverse permutation's row-major layout read through its strides; the
      // destination is row-major, both at offsets into larger buffers.
      const order = Array.from({ length: rank }, (_, i) => rank - 1 - i);
      const stored = order.map((i) => shape[i]!);
      const storedStrides = stored.map((_, i) => stored.slice(i + 1).reduce((x, y) => x * y, 1));
      const srcStrides = shape.map((_, i) => storedStrides[order.indexOf(i)]!);
      const values = Array.from({ length: count + 3 }, (_, i) => i * 1.5 - 4);
      const src = tensor(values, { backend, shape: [count + 3] }).kernel('t');
      const dst = zeros([count + 2], { backend });
      backend.copyStrided(
        { storage: src.storage, offset: 3, dtype: 'f32', strides: srcStrides },
        {
          storage: dst.kernel('t').storage,
          offset: 2,
          dtype: 'f32',
          strides: storedStridesOf(shape),
        },
        shape,
      );
      const expected = [0, 0];
      for (let flat = 0; flat < count; flat++) {
        let rest = flat;
        let at = 3;
        for (let d = rank - 1; d >= 0; d--) {
          at += (rest % shape[d]!) * srcStrides[d]!;
          rest = Math.floor(rest / shape[d]!);
        }
        expected.push(values[at]!);
      }
      expect([...(await dst.read())]).toEqual(expected);
    }
  });

  it('copyStrided swaps two axes over contiguous rows (a head transpose) in f32 and i32, at offsets', async () => {
    const backend = createCpuBackend();
    for (const [dtype, [a, b, c, d]] of [
      ['f32', [2, 3, 4, 8]],
      ['i32', [3, 2, 5, 4]],
      ['f32', [1, 4, 3, 16]],
    ] as const) {
      const count = a * b * c * d;
      const values = Array.from({ length: count + 3 }, (_, i) => i - 7);
      const src = tensor(values, { backend, dtype, shape: [count + 3] }).kernel('t');
      const dst = zeros([count + 2], { backend, dtype });
      // The output [a, c, b, d] row-major, read from [a, b, c, d] row-major: axes 1 and 2 swapped.
      backend.copyStrided(
        { storage: src.storage, offset: 3, dtype, strides: [b * c * d, d, c * d, 1] },
        { storage: dst.kernel('t').storage, offset: 2, dtype, strides: [c * b * d, b * d, d, 1] },
        [a, c, b, d],
      );
      const expected = [0, 0];
      for (let i = 0; i < a; i++)
        for (let k = 0; k < c; k++)
          for (let j = 0; j < b; j++)
            for (let l = 0; l < d; l++) expected.push(values[3 + ((i * b + j) * c + k) * d + l]!);
      expect([...(await dst.read())]).toEqual(expected);
    }
  });

  it('layerNormBackward matches finite differences in f64', async () => {
    const backend = createCpuBackend();
    const [rows, cols] = [2, 5];
    const xv = seededValues(rows * cols, 3);
    const wv = seededValues(cols, 4, 0.5, 1.5);
    const dyv = seededValues(rows * cols, 5);
    const run = (x: number[]) => {
      const out = Tensor.empty(backend, [rows, cols], 'f64');
      const mean = Tensor.empty(backend, [rows], 'f64');
      const rstd = Tensor.empty(backend, [rows], 'f64');
      const xt = tensor(x, { backend, dtype: 'f64', shape: [rows, cols] });
      const wt = tensor(wv, { backend, dtype: 'f64' });
      backend.layerNorm(
        xt.kernel('t'),
        wt.kernel('t'),
        null,
        1e-5,
        out.kernel('t'),
        mean.kernel('t'),
        rstd.kernel('t'),
      );
      return { xt, wt, out, mean, rstd };
    };
    const base = run(xv);
    const dx = Tensor.empty(backend, [rows, cols], 'f64');
    const dw = Tensor.empty(backend, [cols], 'f64');
    const dyt = tensor(dyv, { backend, dtype: 'f64', shape: [rows, cols] });
    backend.layerNormBackward(
      dyt.kernel('t'),
      base.xt.kernel('t'),
      base.wt.kernel('t'),
      base.mean.kernel('t'),
      base.rstd.kernel('t'),
      dx.kernel('t'),
      dw.kernel('t'),
      null,
    );
    const loss = async (x: number[]) => {
      const y = await run(x).out.read();
      return Array.from(y).reduce((s, v, i) => s + v * dyv[i]!, 0);
    };
    const h = 1e-6;
    const numeric: number[] = [];
    for (let i = 0; i < xv.length; i++) {
      const plus = [...xv];
      const minus = [...xv];
      plus[i]! += h;
      minus[i]! -= h;
      numeric.push(((await loss(plus)) - (await loss(minus))) / (2 * h));
    }
    expectClose(await dx.read(), numeric, { rtol: 1e-6, atol: 1e-7 });
  });
});

function storedStridesOf(shape: number[]): number[] {
  return shape.map((_, i) => shape.slice(i + 1).reduce((x, y) => x * y, 1));
}
