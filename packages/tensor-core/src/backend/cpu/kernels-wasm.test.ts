import { describe, expect, it } from 'vitest';
import { ArgumentError } from '../../errors.js';
import { createCpuBackend } from '../../runtime.js';
import { seededValues } from '../../testing/reference.js';
import { expectClose, toleranceFor } from '../../testing/tolerance.js';
import type { Backend, BinaryOp, KernelTensor } from '../backend.js';
import { broadcastKind } from './broadcast-kind.js';
import { loadWasmKernels } from './kernels-wasm.js';
import type { WasmApi } from './matmul-wasm-load.js';

// Every WASM kernel against its TypeScript reference (`kernels: 'typescript'`) on random shapes
// with odd sizes, the operands at a nonzero offset into their storage (views of a larger buffer).
const wasm = createCpuBackend();
const typescript = createCpuBackend({ kernels: 'typescript' });
const SIZES = [1, 3, 7, 17, 1023];

let seed = 1;
function operand(backend: Backend, shape: number[], values?: number[]): KernelTensor {
  const count = shape.reduce((x, y) => x * y, 1);
  const offset = 5;
  const t: KernelTensor = {
    storage: backend.allocate((count + offset) * 4),
    offset,
    dtype: 'f32',
    shape,
  };
  backend.write(t, Float32Array.from(values ?? seededValues(count, seed++, -4, 4)));
  return t;
}

/** The same kernel call on both backends from the same inputs; the two outputs. */
async function both(
  shapes: (number[] | number)[],
  outShape: number[],
  call: (backend: Backend, inputs: (KernelTensor | number)[], out: KernelTensor) => void,
  values?: (number[] | undefined)[],
): Promise<[Float32Array, Float32Array]> {
  const data = shapes.map((s, i) =>
    typeof s === 'number'
      ? s
      : (values?.[i] ??
        seededValues(
          s.reduce((x, y) => x * y, 1),
          seed++,
          -4,
          4,
        )),
  );
  const results: Float32Array[] = [];
  for (const backend of [wasm, typescript]) {
    const inputs = shapes.map((s, i) =>
      typeof s === 'number' ? s : operand(backend, s, data[i] as number[]),
    );
    const out = operand(backend, outShape, new Array(outShape.reduce((x, y) => x * y, 1)).fill(7));
    call(backend, inputs, out);
    results.push((await backend.read(out)) as Float32Array);
  }
  return results as [Float32Array, Float32Array];
}

const bits = (x: Float32Array) => new Uint32Array(x.buffer, x.byteOffset, x.length);

describe('the WASM SIMD kernels', () => {
  it('run where the engine has WebAssembly SIMD, and the TypeScript kernels on request', () => {
    expect(wasm.kernels).toBe('wasm-simd');
    expect(typescript.kernels).toBe('typescript');
    expect(wasm.description).toContain('hot f32 kernels');
  });

  it('fall back to the TypeScript kernels where WebAssembly or its SIMD is missing', () => {
    const noSimd: WasmApi = {
      validate: () => false,
      Module: WebAssembly.Module,
      Instance: WebAssembly.Instance,
    };
    expect(loadWasmKernels(noSimd)).toBeNull();
    expect(loadWasmKernels(null)).toBeNull();
    expect(loadWasmKernels()).not.toBeNull();
  });

  it('rejects an unknown kernels option', () => {
    expect(() => createCpuBackend({ kernels: 'fast' as never })).toThrow(
      new ArgumentError('createCpuBackend', "kernels 'fast' is not 'auto' or 'typescript'"),
    );
  });

  it('classify the broadcasts they take', () => {
    expect(broadcastKind([2, 3], [2, 3])).toEqual({ kind: 'same' });
    expect(broadcastKind([3], [4, 2, 3])).toEqual({ kind: 'repeat', period: 3 });
    expect(broadcastKind([1, 2, 3], [4, 2, 3])).toEqual({ kind: 'repeat', period: 6 });
    expect(broadcastKind([4, 1, 1], [4, 2, 3])).toEqual({ kind: 'perRow', inner: 6 });
    expect(broadcastKind([4, 2, 1], [4, 2, 3])).toEqual({ kind: 'perRow', inner: 3 });
    expect(broadcastKind([1], [4, 2, 3])).toEqual({ kind: 'perRow', inner: 24 });
    expect(broadcastKind([4, 1, 3], [4, 2, 3])).toBeNull();
    expect(broadcastKind([2, 1], [4, 2, 3])).toBeNull();
  });

  for (const op of ['add', 'sub', 'mul', 'div'] as BinaryOp[]) {
    for (const cols of SIZES) {
      const rows = cols === 1023 ? 3 : 5;
      const cases: [string, number[] | number, number[] | number][] = [
        ['same shape', [rows, cols], [rows, cols]],
        ['a bias row', [rows, cols], [cols]],
        ['a repeated row first', [1, cols], [rows, cols]],
        ['one value per row', [rows, cols], [rows, 1]],
        ['one value per row first', [rows, 1], [rows, cols]],
        ['a single element', [rows, cols], [1]],
        ['a number that is not an f32', [rows, cols], 0.1],
        ['a number first', 1 / 3, [rows, cols]],
        // f32 values run in f32 lanes (attention's 1/8, a clipping coefficient from Math.fround)
        ['a number that is an f32', [rows, cols], 0.125],
        ['an f32 number first', Math.fround(0.7), [rows, cols]],
        ['an f32 number that makes subnormals', [rows, cols], 2 ** -130],
        ['an outer product (the TypeScript fallback)', [rows, 1], [1, cols]],
      ];
      for (const [name, a, b] of cases) {
        it(`${op} agrees bit for bit: ${name}, ${rows}x${cols}`, async () => {
          const [got, reference] = await both([a, b], [rows, cols], (backend, [x, y], out) =>
            backend.binary(op, x!, y!, out),
          );
          expect(bits(got)).toEqual(bits(reference));
        });
      }
    }
  }

  it('run elementwise calls and softmax rows in pieces that fit what they keep, with the same bits', async () => {
    // [Note: the WASM kernels' memory], with 1 MiB kept instead of 64.
    const small = loadWasmKernels(undefined, 2 ** 20)!;
    const whole = loadWasmKernels()!;
    const n = 300_000;
    const read = async (t: KernelTensor) => bits(Float32Array.from(await wasm.read(t)));
    const pair = () => [operand(wasm, [n]), operand(wasm, [n])] as const;
    const x = operand(wasm, [n], seededValues(n, 5, -2, 2));
    const y = operand(wasm, [n], seededValues(n, 6, -2, 2));
    let [a, b] = pair();
    expect(small.unary('gelu', x, a) && whole.unary('gelu', x, b)).toBe(true);
    expect(await read(a)).toEqual(await read(b));
    [a, b] = pair();
    expect(small.binary('mul', x, y, a) && whole.binary('mul', x, y, b)).toBe(true);
    expect(await read(a)).toEqual(await read(b));
    [a, b] = pair();
    expect(small.binary('sub', 1.5, y, a) && whole.binary('sub', 1.5, y, b)).toBe(true);
    expect(await read(a)).toEqual(await read(b));
    const rows = operand(wasm, [300, 1000], seededValues(n, 7, -5, 5));
    [a, b] = [operand(wasm, [300, 1000]), operand(wasm, [300, 1000])];
    expect(small.softmax(rows, a, false) && whole.softmax(rows, b, false)).toBe(true);
    expect(await read(a)).toEqual(await read(b));
    const state = (k: number) =>
      [0, 1, 2, 3].map((i) => operand(wasm, [n], seededValues(n, k + i, 0, 1)));
    const [p1, g1, m1, v1] = state(10) as [KernelTensor, KernelTensor, KernelTensor, KernelTensor];
    const [p2, g2, m2, v2] = state(10) as [KernelTensor, KernelTensor, KernelTensor, KernelTensor];
    const hyper = {
      lr: 1e-3,
      beta1: 0.9,
      beta2: 0.999,
      eps: 1e-8,
      weightDecay: 0.1,
      step: 3,
      decoupled: true,
      gradScale: 1,
    };
    expect(small.adam(p1, g1, m1, v1, hyper) && whole.adam(p2, g2, m2, v2, hyper)).toBe(true);
    for (const [got, want] of [
      [p1, p2],
      [m1, m2],
      [v1, v2],
    ] as const)
      expect(await read(got)).toEqual(await read(want));
    expect(small.scratchBytes).toBeLessThanOrEqual(2 ** 20);
    expect(whole.scratchBytes).toBeGreaterThan(4 * n * 4);
  });

  it('let go of a memory grown past what they keep at the next call that fits in that', async () => {
    const kernels = loadWasmKernels(undefined, 2 ** 20)!;
    // A broadcasting add takes its operands whole: the memory grows past the 1 MiB kept.
    const x = operand(wasm, [600, 500], seededValues(300_000, 5, -2, 2));
    const bias = operand(wasm, [500], seededValues(500, 6, -2, 2));
    expect(kernels.binary('add', x, bias, operand(wasm, [600, 500]))).toBe(true);
    expect(kernels.scratchBytes).toBeGreaterThan(2 * 300_000 * 4);
    const small = operand(wasm, [1000], seededValues(1000, 7, -2, 2));
    const result = operand(wasm, [1000]);
    expect(kernels.unary('square', small, result)).toBe(true);
    expect(kernels.scratchBytes).toBeLessThanOrEqual(2 ** 20);
    const values = Array.from(await wasm.read(small));
    expect(Array.from(await wasm.read(result))).toEqual(values.map((v) => Math.fround(v * v)));
  });

  it('take exactly the broadcasts they name and leave the rest to TypeScript', () => {
    const kernels = loadWasmKernels()!;
    const t = (shape: number[]) => operand(wasm, shape);
    expect(kernels.binary('add', t([2, 3]), t([3]), t([2, 3]))).toBe(true);
    expect(kernels.binary('mul', 2.5, t([2, 3]), t([2, 3]))).toBe(true);
    expect(kernels.binary('add', t([2, 1]), t([1, 3]), t([2, 3]))).toBe(false);
    expect(kernels.binary('pow', t([2, 3]), t([2, 3]), t([2, 3]))).toBe(false);
    expect(kernels.unary('tanh', t([2, 3]), t([2, 3]))).toBe(false);
    expect(kernels.softmax(t([2, 3]), t([2, 3]), true)).toBe(false);
    expect(kernels.reduce('max', t([2, 3]), 1, t([2]))).toBe(false);
    expect(kernels.reduce('sum', t([2, 3]), 0, t([3]))).toBe(true);
    expect(kernels.layerNorm(t([2, 3]), null, null, 1e-5, t([2, 3]), t([2]), t([2]))).toBe(true);
    const [p, g, m, v] = [t([5]), t([5]), t([5]), t([5])];
    const hyper = { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0 };
    const adam = { ...hyper, step: 1, decoupled: true, gradScale: 1 };
    expect(kernels.adam(p, g, m, v, adam)).toBe(true);
    expect(kernels.adam(p, { ...g, dtype: 'f16' }, m, v, adam)).toBe(false);
  });

  for (const n of SIZES) {
    it(`square agrees bit for bit, n = ${n}`, async () => {
      const [got, reference] = await both([[n]], [n], (backend, [x], out) =>
        backend.unary('square', x as KernelTensor, out),
      );
      expect(bits(got)).toEqual(bits(reference));
    });

    it(`gelu and its gradient agree to the f32 tolerance, n = ${n}`, async () => {
      // Inputs over [-8, 8], where erf's approximation and GELU's cancellation are hardest.
      const x = seededValues(n, n, -8, 8);
      const [got, reference] = await both(
        [[n]],
        [n],
        (backend, [t], out) => backend.unary('gelu', t as KernelTensor, out),
        [x],
      );
      expectClose(got, reference, toleranceFor('f32'));
      const [gotGrad, referenceGrad] = await both(
        [[n], [n]],
        [n],
        (backend, [t, dy], out) => backend.binary('geluGrad', t!, dy!, out),
        [x],
      );
      expectClose(gotGrad, referenceGrad, toleranceFor('f32'));
    });

    it(`where with a repeated mask agrees bit for bit, ${n} columns`, async () => {
      const mask = Array.from({ length: 3 * n }, (_, i) =>
        i % 3 === 0 ? 0 : i % 5 === 0 ? 1 : -2,
      );
      for (const [a, b] of [
        [Number.NEGATIVE_INFINITY, [4, 3, n]],
        [[4, 3, n], 0.1],
      ] as const) {
        const [got, reference] = await both(
          [[3, n], a as number[] | number, b as number[] | number],
          [4, 3, n],
          (backend, [c, x, y], out) => backend.where(c as KernelTensor, x!, y!, out),
          [mask],
        );
        expect(bits(got)).toEqual(bits(reference));
      }
    });

    it(`softmax agrees to the f32 tolerance with masked entries, rows of ${n}`, async () => {
      const values = seededValues(4 * n, n, -30, 30).map((v, i) =>
        i % 4 === 1 && i % n !== 0 ? Number.NEGATIVE_INFINITY : v,
      );
      // A whole row masked gives NaN in both (0 / 0).
      for (let c = 0; c < n; c++) values[3 * n + c] = Number.NEGATIVE_INFINITY;
      const [got, reference] = await both(
        [[4, n]],
        [4, n],
        (backend, [x], out) => backend.softmax(x as KernelTensor, out, false),
        [values],
      );
      expectClose(got, reference, toleranceFor('f32'));
      for (let i = 0; i < 4 * n; i++) {
        if (values[i] === Number.NEGATIVE_INFINITY && i < 3 * n) expect(got[i]).toBe(0);
      }
    });

    it(`sum and mean along each axis agree bit for bit, [3, ${n}, 5]`, async () => {
      for (const op of ['sum', 'mean'] as const) {
        for (const [axis, outShape] of [
          [0, [n, 5]],
          [1, [3, 5]],
          [2, [3, n]],
        ] as const) {
          const [got, reference] = await both([[3, n, 5]], [...outShape], (backend, [x], out) =>
            backend.reduce(op, x as KernelTensor, axis, out),
          );
          expect(bits(got)).toEqual(bits(reference));
        }
      }
    });
  }

  for (const cols of SIZES) {
    for (const [withWeight, withBias] of [
      [true, true],
      [true, false],
      [false, false],
    ] as const) {
      it(`layer norm and its backward agree bit for bit: 7 rows of ${cols}, weight ${withWeight}, bias ${withBias}`, async () => {
        const rows = 7;
        const x = seededValues(rows * cols, cols, -3, 5);
        const weight = seededValues(cols, cols + 1, 0.5, 1.5);
        const bias = seededValues(cols, cols + 2, -1, 1);
        const dy = seededValues(rows * cols, cols + 3, -1, 1);
        const results: Float32Array[][] = [];
        for (const backend of [wasm, typescript]) {
          // Outputs start at 7, so one the kernel must leave alone compares equal only if it does.
          const t = (shape: number[], values?: number[]) =>
            operand(backend, shape, values ?? new Array(shape.reduce((a, b) => a * b, 1)).fill(7));
          const [xt, wt, bt] = [t([rows, cols], x), t([cols], weight), t([cols], bias)];
          const [out, mean, rstd] = [t([rows, cols]), t([rows]), t([rows])];
          backend.layerNorm(
            xt,
            withWeight ? wt : null,
            withBias ? bt : null,
            1e-5,
            out,
            mean,
            rstd,
          );
          const [dx, dw, db] = [t([rows, cols]), t([cols]), t([cols])];
          backend.layerNormBackward(
            t([rows, cols], dy),
            xt,
            withWeight ? wt : null,
            mean,
            rstd,
            dx,
            withWeight ? dw : null,
            withBias ? db : null,
          );
          results.push(
            (await Promise.all(
              [out, mean, rstd, dx, dw, db].map((r) => backend.read(r)),
            )) as Float32Array[],
          );
        }
        const [got, reference] = results as [Float32Array[], Float32Array[]];
        for (let i = 0; i < got.length; i++) expect(bits(got[i]!)).toEqual(bits(reference[i]!));
      });
    }

    it(`Adam and AdamW agree bit for bit, n = ${cols}`, async () => {
      for (const [weightDecay, decoupled] of [
        [0, true],
        [0.1, true],
        [0.01, false],
      ] as const) {
        const hyper = {
          lr: 3e-3,
          beta1: 0.9,
          beta2: 0.95,
          eps: 1e-8,
          weightDecay,
          step: 3,
          decoupled,
          gradScale: 0.5,
        };
        const values = [0, 1, 2, 3].map((i) => seededValues(cols, cols + i, -1, 1));
        values[3] = values[3]!.map(Math.abs);
        const results: Float32Array[][] = [];
        for (const backend of [wasm, typescript]) {
          const [p, g, m, v] = values.map((x) => operand(backend, [cols], x)) as KernelTensor[];
          backend.adam(p!, g!, m!, v!, hyper);
          results.push(
            (await Promise.all([p!, m!, v!].map((t) => backend.read(t)))) as Float32Array[],
          );
        }
        for (let i = 0; i < 3; i++) expect(bits(results[0]![i]!)).toEqual(bits(results[1]![i]!));
      }
    });
  }

  it('propagate NaN as the TypeScript kernels do', async () => {
    const x = [Number.NaN, 1, -2, Number.POSITIVE_INFINITY, 3];
    for (const call of [
      (b: Backend, [t]: (KernelTensor | number)[], out: KernelTensor) =>
        b.unary('gelu', t as KernelTensor, out),
      (b: Backend, [t]: (KernelTensor | number)[], out: KernelTensor) =>
        b.softmax(t as KernelTensor, out, false),
      (b: Backend, [t]: (KernelTensor | number)[], out: KernelTensor) =>
        b.binary('add', t!, 1, out),
    ]) {
      const [got, reference] = await both([[5]], [5], call, [x]);
      expect(Array.from(got, Number.isNaN)).toEqual(Array.from(reference, Number.isNaN));
    }
  });
});
