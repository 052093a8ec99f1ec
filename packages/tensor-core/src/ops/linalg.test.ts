import { expect, it } from 'vitest';
import { ArgumentError, DTypeError, ShapeError } from '../errors.js';
import { ClosenessError, describeBackends, expectClose, toleranceFor } from '../testing/index.js';
import { matmulReference, roundValues, seededValues } from '../testing/reference.js';
import { tensor } from './creation.js';
import { matmul } from './linalg.js';

function transpose2d(values: readonly number[], rows: number, cols: number): number[] {
  const out = new Array<number>(rows * cols);
  for (let r = 0; r < rows; r++)
    for (let c = 0; c < cols; c++) out[c * rows + r] = values[r * cols + c]!;
  return out;
}

describeBackends('matmul', (ctx) => {
  const sizes: [number, number, number][] = [
    [1, 1, 1],
    [1, 7, 1],
    [3, 5, 7],
    [13, 1, 11],
    [17, 31, 9],
    [33, 65, 17],
    [2, 0, 3],
  ];

  it('2-D products match a float64 triple loop, with and without transposes', async () => {
    for (const [m, k, n] of sizes) {
      const av = roundValues(seededValues(m * k, m + k), 'f32');
      const bv = roundValues(seededValues(k * n, k + n), 'f32');
      const expected = matmulReference(av, bv, m, k, n);
      const a = tensor(av, { backend: ctx.backend, shape: [m, k] });
      const b = tensor(bv, { backend: ctx.backend, shape: [k, n] });
      const y = matmul(a, b);
      expect(y.shape).toEqual([m, n]);
      expectClose(await y.read(), expected, { rtol: 1e-5, atol: 1e-5 });
      const aT = tensor(transpose2d(av, m, k), { backend: ctx.backend, shape: [k, m] });
      const bT = tensor(transpose2d(bv, k, n), { backend: ctx.backend, shape: [n, k] });
      expectClose(await matmul(aT, bT, { transposeA: true, transposeB: true }).read(), expected, {
        rtol: 1e-5,
        atol: 1e-5,
      });
      expectClose(await matmul(a, bT, { transposeB: true }).read(), expected, {
        rtol: 1e-5,
        atol: 1e-5,
      });
    }
  });

  it('M, N and K crossing the 64x64 output tile and the k unroll, batched, with transposes', async () => {
    // WebGPU tiles: 64x64 outputs per workgroup, 8x8 per invocation, k unrolled by 4 (register
    // tiled) or staged 16 deep (shared memory). 1, 65, 130 and the primes 67, 131 cross them.
    const shapes: [number, number, number][] = [
      [1, 130, 65],
      [65, 1, 130],
      [130, 65, 1],
      [67, 131, 129],
      [131, 67, 65],
    ];
    for (const [m, k, n] of shapes) {
      for (const [transposeA, transposeB] of [
        [false, false],
        [true, true],
        [false, true],
      ] as const) {
        const batch = 2;
        const av = roundValues(seededValues(batch * m * k, m + 2 * k, -1, 1), 'f32');
        const bv = roundValues(seededValues(batch * k * n, n + 3 * k, -1, 1), 'f32');
        const expected: number[] = [];
        const aStored: number[] = [];
        const bStored: number[] = [];
        for (let i = 0; i < batch; i++) {
          const ai = av.slice(i * m * k, (i + 1) * m * k);
          const bi = bv.slice(i * k * n, (i + 1) * k * n);
          expected.push(...matmulReference(ai, bi, m, k, n));
          aStored.push(...(transposeA ? transpose2d(ai, m, k) : ai));
          bStored.push(...(transposeB ? transpose2d(bi, k, n) : bi));
        }
        const a = tensor(aStored, {
          backend: ctx.backend,
          shape: transposeA ? [batch, k, m] : [batch, m, k],
        });
        const b = tensor(bStored, {
          backend: ctx.backend,
          shape: transposeB ? [batch, n, k] : [batch, k, n],
        });
        const y = matmul(a, b, { transposeA, transposeB });
        expect(y.shape).toEqual([batch, m, n]);
        try {
          expectClose(await y.read(), expected, { rtol: 1e-5, atol: 2e-5 });
        } catch (error) {
          throw new ClosenessError(
            `[${m}, ${k}] @ [${k}, ${n}] transposeA ${transposeA} transposeB ${transposeB}: ${(error as Error).message}`,
          );
        }
      }
    }
  });

  it('promotes 1-D operands and drops the added dim, like torch.matmul', async () => {
    const v = tensor([1, 2, 3], { backend: ctx.backend });
    const m = tensor(
      [
        [1, 0],
        [0, 1],
        [1, 1],
      ],
      { backend: ctx.backend },
    );
    const vm = matmul(v, m);
    expect(vm.shape).toEqual([2]);
    expect([...(await vm.read())]).toEqual([4, 5]);
    const mv = matmul(
      tensor(
        [
          [1, 2, 3],
          [4, 5, 6],
        ],
        { backend: ctx.backend },
      ),
      v,
    );
    expect(mv.shape).toEqual([2]);
    expect([...(await mv.read())]).toEqual([14, 32]);
    const dot = matmul(v, v);
    expect(dot.shape).toEqual([]);
    expect(await dot.item()).toBe(14);
  });

  it('broadcasts batch dims ([2,1,M,K] @ [3,K,N] -> [2,3,M,N])', async () => {
    const [m, k, n] = [3, 4, 5];
    const av = roundValues(seededValues(2 * m * k, 21), 'f32');
    const bv = roundValues(seededValues(3 * k * n, 22), 'f32');
    const a = tensor(av, { backend: ctx.backend, shape: [2, 1, m, k] });
    const b = tensor(bv, { backend: ctx.backend, shape: [3, k, n] });
    const y = matmul(a, b);
    expect(y.shape).toEqual([2, 3, m, n]);
    const expected: number[] = [];
    for (let i = 0; i < 2; i++) {
      for (let j = 0; j < 3; j++) {
        expected.push(
          ...matmulReference(
            av.slice(i * m * k, (i + 1) * m * k),
            bv.slice(j * k * n, (j + 1) * k * n),
            m,
            k,
            n,
          ),
        );
      }
    }
    expectClose(await y.read(), expected, { rtol: 1e-5, atol: 1e-5 });
  });

  it('computes in f16 and bf16 with per-dtype tolerance', async () => {
    for (const dtype of ['f16', 'bf16'] as const) {
      const [m, k, n] = [5, 19, 6];
      const av = roundValues(seededValues(m * k, 31, -1, 1), dtype);
      const bv = roundValues(seededValues(k * n, 32, -1, 1), dtype);
      const y = matmul(
        tensor(av, { dtype, backend: ctx.backend, shape: [m, k] }),
        tensor(bv, { dtype, backend: ctx.backend, shape: [k, n] }),
      );
      expect(y.dtype).toBe(dtype);
      expectClose(await y.read(), matmulReference(av, bv, m, k, n), {
        ...toleranceFor(dtype),
        atol: 0.03,
      });
    }
  });

  it('rejects mismatched inner dims, rank 0, i32 and transposes of vectors', () => {
    const a = tensor([[1, 2, 3]], { backend: ctx.backend });
    const b = tensor([[1, 2]], { backend: ctx.backend });
    expect(() => matmul(a, b)).toThrow(ShapeError);
    expect(() => matmul(a, b)).toThrow(
      '[matmul] inner dimensions differ (3 and 1) (shapes [1, 3] and [1, 2])',
    );
    expect(() => matmul(tensor(1, { backend: ctx.backend }), a)).toThrow(
      '[matmul] operands must have at least one dimension',
    );
    const i = tensor(new Int32Array([1, 2]), { backend: ctx.backend, shape: [1, 2] });
    expect(() => matmul(i, i, { transposeB: true })).toThrow(DTypeError);
    expect(() => matmul(tensor([1, 2], { backend: ctx.backend }), b, { transposeA: true })).toThrow(
      ArgumentError,
    );
    const batchA = tensor(seededValues(2 * 6, 1), { backend: ctx.backend, shape: [2, 2, 3] });
    const batchB = tensor(seededValues(3 * 6, 1), { backend: ctx.backend, shape: [3, 3, 2] });
    expect(() => matmul(batchA, batchB)).toThrow('[matmul] shapes do not broadcast at dimension 0');
  });
});
