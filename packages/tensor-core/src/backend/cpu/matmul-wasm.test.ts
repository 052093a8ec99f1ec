import { describe, expect, it } from 'vitest';
import { ArgumentError } from '../../errors.js';
import { createCpuBackend } from '../../runtime.js';
import { seededValues } from '../../testing/reference.js';
import type { Backend, KernelTensor } from '../backend.js';
import { foldBatch, type MatmulShape, type WasmMatmul } from './matmul-wasm.js';
import { loadWasmMatmul, type WasmApi } from './matmul-wasm-load.js';
import { MATMUL_DEFAULTS } from './matmul-wat.mjs';
import { matmulScratchBytes } from './matmul-wasm.generated.js';
import { runInSlicesOfK, sliceOfK } from './matmul-wasm-slices.js';
import type { PackJob } from './matmul-threads.js';

type Case = Omit<MatmulShape, 'transposeA' | 'transposeB'>;

// Odd sizes, edge tiles on both axes, k across the 256-deep blocks, rows across the 64-row blocks,
// batches with either operand broadcast.
const CASES: Case[] = [
  { batch: 1, batchA: 1, batchB: 1, m: 1, k: 1, n: 1 },
  { batch: 1, batchA: 1, batchB: 1, m: 3, k: 131, n: 517 },
  { batch: 1, batchA: 1, batchB: 1, m: 67, k: 65, n: 5 },
  { batch: 1, batchA: 1, batchB: 1, m: 1, k: 1, n: 1025 },
  { batch: 1, batchA: 1, batchB: 1, m: 70, k: 513, n: 19 },
  { batch: 3, batchA: 3, batchB: 1, m: 5, k: 300, n: 9 },
  { batch: 2, batchA: 1, batchB: 2, m: 4, k: 8, n: 8 },
  { batch: 4, batchA: 4, batchB: 4, m: 17, k: 33, n: 31 },
];

function operand(backend: Backend, shape: number[], values?: number[]): KernelTensor {
  const t: KernelTensor = {
    storage: backend.allocate(shape.reduce((x, y) => x * y, 1) * 4),
    offset: 0,
    dtype: 'f32',
    shape,
  };
  if (values) backend.write(t, Float32Array.from(values));
  return t;
}

/** The k steps the WASM kernel sums from 0 before adding the block's sum to C. */
const KC = MATMUL_DEFAULTS.kc;

/**
 * C = A B in f32 from f32 products, summed by blocks of KC k steps: each block in k order from 0,
 * the blocks' sums added to C in k order. The WASM kernel's exact contract.
 */
function blockedF32(
  a: Float32Array,
  b: Float32Array,
  { m, k, n }: Case,
  transposeA: boolean,
  transposeB: boolean,
): Float32Array {
  const c = new Float32Array(m * n);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let total = 0;
      for (let k0 = 0; k0 < k; k0 += KC) {
        let sum = 0;
        for (let t = k0; t < Math.min(k, k0 + KC); t++) {
          const av = transposeA ? a[t * m + i]! : a[i * k + t]!;
          const bv = transposeB ? b[j * k + t]! : b[t * n + j]!;
          sum = Math.fround(sum + Math.fround(av * bv));
        }
        total = k0 === 0 ? sum : Math.fround(total + sum);
      }
      c[i * n + j] = total;
    }
  }
  return c;
}

async function matmul(
  backend: Backend,
  c: Case,
  transposeA: boolean,
  transposeB: boolean,
  av: number[],
  bv: number[],
): Promise<Float32Array> {
  const a = operand(backend, transposeA ? [c.batchA, c.k, c.m] : [c.batchA, c.m, c.k], av);
  const b = operand(backend, transposeB ? [c.batchB, c.n, c.k] : [c.batchB, c.k, c.n], bv);
  const out = operand(backend, [c.batch, c.m, c.n]);
  backend.matmul(a, b, out, transposeA, transposeB);
  return (await backend.read(out)) as Float32Array;
}

/** `plan`'s results against one call's (`whole`), every transpose of a and b, bit for bit. */
function expectBitsOfOneCall(plan: WasmMatmul, whole: WasmMatmul, c: Case, label: string): void {
  for (const transposeA of [false, true]) {
    for (const transposeB of [false, true]) {
      const shape = { ...c, transposeA, transposeB };
      const a = Float32Array.from(seededValues(c.batchA * c.m * c.k, c.m + c.k, -1, 1));
      const b = Float32Array.from(seededValues(c.batchB * c.k * c.n, c.n + c.k, -1, 1));
      const got = new Float32Array(c.batch * c.m * c.n);
      const expected = new Float32Array(c.batch * c.m * c.n);
      plan.run(a, b, got, shape);
      whole.run(a, b, expected, shape);
      expect(got, `${label}${JSON.stringify(shape)}`).toEqual(expected);
    }
  }
}

describe('the WASM SIMD f32 matmul', () => {
  const wasm = createCpuBackend({ matmulFma: 'off' });
  const typescript = createCpuBackend({ matmulKernel: 'typescript' });

  it('runs where the engine has WebAssembly SIMD (Node)', () => {
    expect(wasm.matmulKernel).toBe('wasm-simd');
    expect(typescript.matmulKernel).toBe('typescript');
  });

  for (const c of CASES) {
    for (const [transposeA, transposeB] of [
      [false, false],
      [true, false],
      [false, true],
      [true, true],
    ] as const) {
      const name = `batch ${c.batch} (${c.batchA}, ${c.batchB}), ${c.m}x${c.k}x${c.n}, transposes ${transposeA} ${transposeB}`;
      it(`sums in f32 by blocks of k, bit for bit, and agrees with the TypeScript kernel: ${name}`, async () => {
        const av = seededValues(c.batchA * c.m * c.k, c.m + 7 * c.k, -1, 1);
        const bv = seededValues(c.batchB * c.k * c.n, c.n + 11 * c.k, -1, 1);
        const got = await matmul(wasm, c, transposeA, transposeB, av, bv);
        const reference = await matmul(typescript, c, transposeA, transposeB, av, bv);
        const a = Float32Array.from(av);
        const b = Float32Array.from(bv);
        for (let p = 0; p < c.batch; p++) {
          const pa = a.subarray((c.batchA === 1 ? 0 : p) * c.m * c.k);
          const pb = b.subarray((c.batchB === 1 ? 0 : p) * c.k * c.n);
          const expected = blockedF32(pa, pb, c, transposeA, transposeB);
          expect(got.subarray(p * c.m * c.n, (p + 1) * c.m * c.n)).toEqual(expected);
        }
        expectWithinSummationBound(got, reference, av, bv, c, transposeA, transposeB);
      });
    }
  }

  it('runs calls past its memory budget in blocks of C, with the bits of one call and the memory of the budget', () => {
    // [Note: the WASM matmul in blocks]: a budget of a few blocks of 8 columns and 4 rows.
    const budget = matmulScratchBytes + 64 * 1024;
    const blocked = loadWasmMatmul(undefined, { threads: 1, fma: 'off', maxScratchBytes: budget })!;
    const whole = loadWasmMatmul(undefined, { threads: 1, fma: 'off' })!;
    for (const c of [
      { batch: 1, batchA: 1, batchB: 1, m: 67, k: 300, n: 45 },
      { batch: 3, batchA: 3, batchB: 1, m: 9, k: 257, n: 70 },
      { batch: 2, batchA: 1, batchB: 2, m: 130, k: 33, n: 17 },
    ]) {
      expectBitsOfOneCall(blocked, whole, c, '');
    }
    expect(blocked.scratchBytes).toBeLessThanOrEqual(budget + 65536);
    expect(whole.scratchBytes).toBeGreaterThan(budget + 65536);
  });

  it('runs a call with a small result past its budget in slices of k: the bits of one call, each operand packed once', async () => {
    // [Note: the WASM matmul in slices of k]: slices of 1024 k steps (4 of the gemm's blocks).
    const budgetFor = (m: number, n: number) =>
      matmulScratchBytes +
      Math.ceil((m * n * 4) / 16) * 16 +
      64 +
      1100 * 4 * (m + Math.ceil(m / 4) * 4 + n + Math.ceil(n / 8) * 8);
    const cases = [
      { batch: 1, batchA: 1, batchB: 1, m: 37, k: 5000, n: 29 },
      { batch: 2, batchA: 2, batchB: 2, m: 13, k: 2100, n: 70 },
      // 2^21 multiply-adds a slice and more: the threads split it.
      { batch: 1, batchA: 1, batchB: 1, m: 200, k: 3000, n: 40 },
    ];
    const whole = loadWasmMatmul(undefined, { threads: 1, fma: 'off' })!;
    for (const threads of [1, 2]) {
      for (const c of cases) {
        const budget = budgetFor(c.m, c.n);
        expect(sliceOfK({ ...c, transposeA: false, transposeB: false }, budget)).toBe(1024);
        const sliced = loadWasmMatmul(undefined, { threads, fma: 'off', maxScratchBytes: budget })!;
        await sliced.startThreads();
        expectBitsOfOneCall(sliced, whole, c, `${threads} thread(s), `);
        expect(sliced.scratchBytes).toBeLessThanOrEqual(budget + 65536);
        sliced.dispose();
      }
    }
    // Each element of A and B is packed once (blocks of C pack the whole of A once a block).
    const c = { ...cases[0]!, transposeA: false, transposeB: true };
    const packed = [0, 0];
    const sliced = loadWasmMatmul(undefined, {
      threads: 1,
      fma: 'off',
      maxScratchBytes: budgetFor(c.m, c.n),
    })!;
    const target = {
      reserve: (bytes: number) => sliced.reserve(bytes),
      packAll: (jobs: readonly PackJob[], macs: number) => {
        jobs.forEach((j, i) => {
          packed[i]! += j.outer * j.inner;
        });
        sliced.packAll(jobs, macs);
      },
      gemm: sliced.gemm.bind(sliced),
    };
    const a = Float32Array.from(seededValues(c.m * c.k, 5, -1, 1));
    const b = Float32Array.from(seededValues(c.k * c.n, 6, -1, 1));
    const got = new Float32Array(c.m * c.n);
    const expected = new Float32Array(c.m * c.n);
    runInSlicesOfK(target, a, b, got, c, 1024);
    whole.run(a, b, expected, c);
    expect(got).toEqual(expected);
    expect(packed).toEqual([c.m * c.k, c.k * c.n]);
    // A result past half the budget runs in blocks of C.
    expect(sliceOfK({ ...c, m: 400, n: 400 }, budgetFor(c.m, c.n))).toBe(0);
  });

  it('folds a batch with one shared B into rows, and only that batch', () => {
    // [Note: a shared B folds the batch into rows]; the cases above check the bits of both paths.
    const linear = { batch: 4, batchA: 4, batchB: 1, m: 256, k: 768, n: 50304 };
    expect(foldBatch({ ...linear, transposeA: false, transposeB: true })).toEqual({
      ...linear,
      batch: 1,
      batchA: 1,
      m: 1024,
      transposeA: false,
      transposeB: true,
    });
    for (const kept of [
      { ...linear, transposeA: true, transposeB: false },
      { ...linear, batchB: 4, transposeA: false, transposeB: false },
      { ...linear, batchA: 1, batchB: 4, transposeA: false, transposeB: false },
    ]) {
      expect(foldBatch(kept)).toBe(kept);
    }
  });

  it('overwrites the output when a call reuses module memory left dirty by a larger one', async () => {
    const big: Case = { batch: 1, batchA: 1, batchB: 1, m: 9, k: 300, n: 13 };
    const small: Case = { batch: 1, batchA: 1, batchB: 1, m: 2, k: 3, n: 5 };
    await matmul(wasm, big, false, false, seededValues(9 * 300, 1), seededValues(300 * 13, 2));
    const av = seededValues(6, 3);
    const bv = seededValues(15, 4);
    const got = await matmul(wasm, small, false, false, av, bv);
    expect(got).toEqual(
      blockedF32(Float32Array.from(av), Float32Array.from(bv), small, false, false),
    );
  });

  it('falls back to the TypeScript kernel where WebAssembly or its SIMD is missing', async () => {
    const noSimd: WasmApi = {
      validate: () => false,
      Module: WebAssembly.Module,
      Instance: WebAssembly.Instance,
    };
    expect(loadWasmMatmul(noSimd)).toBeNull();
    expect(loadWasmMatmul(null)).toBeNull();
    expect(loadWasmMatmul()).not.toBeNull();
    // The fallback backend computes the TypeScript kernel's f64 sums.
    const c: Case = { batch: 1, batchA: 1, batchB: 1, m: 3, k: 5, n: 2 };
    const av = seededValues(15, 5);
    const bv = seededValues(10, 6);
    const got = await matmul(typescript, c, false, false, av, bv);
    const expected = new Float32Array(6);
    for (let i = 0; i < 3; i++) {
      for (let j = 0; j < 2; j++) {
        let sum = 0;
        for (let t = 0; t < 5; t++)
          sum += Math.fround(av[i * 5 + t]!) * Math.fround(bv[t * 2 + j]!);
        expected[i * 2 + j] = sum;
      }
    }
    expect(got).toEqual(expected);
  });

  it('rejects an unknown matmulKernel option', () => {
    expect(() => createCpuBackend({ matmulKernel: 'fast' as never })).toThrowError(
      "[createCpuBackend] matmulKernel 'fast' is not 'auto' or 'typescript'",
    );
    expect(
      ArgumentError.isInstance(
        captureError(() => createCpuBackend({ matmulKernel: 'x' as never })),
      ),
    ).toBe(true);
  });
});

/**
 * |f32 sum - f64 sum| <= (k + 1) eps |a| |b| per element (eps = 2^-24): the textbook bound of
 * recursive summation in f32 (Higham, Accuracy and Stability, 3.1), against the TypeScript kernel's
 * f64 sums rounded once. A flat relative tolerance would fail where a sum cancels to near zero.
 */
function expectWithinSummationBound(
  got: Float32Array,
  reference: Float32Array,
  av: number[],
  bv: number[],
  c: Case,
  transposeA: boolean,
  transposeB: boolean,
): void {
  const { m, k, n } = c;
  for (let p = 0; p < c.batch; p++) {
    const aBase = (c.batchA === 1 ? 0 : p) * m * k;
    const bBase = (c.batchB === 1 ? 0 : p) * k * n;
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let magnitude = 0;
        for (let t = 0; t < k; t++) {
          const a = Math.fround(av[aBase + (transposeA ? t * m + i : i * k + t)]!);
          const b = Math.fround(bv[bBase + (transposeB ? j * k + t : t * n + j)]!);
          magnitude += Math.abs(a * b);
        }
        const at = p * m * n + i * n + j;
        const bound = (k + 1) * 2 ** -24 * magnitude + 2 ** -24 * Math.abs(reference[at]!);
        if (!(Math.abs(got[at]! - reference[at]!) <= bound)) {
          throw new Error(`element ${at}: ${got[at]} vs ${reference[at]}, bound ${bound}`);
        }
      }
    }
  }
}

function captureError(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    return error;
  }
  return undefined;
}
