import { describe, expect, it } from 'vitest';
import type { Backend, KernelTensor } from '../backend/backend.js';
import { loadWasmKernels } from '../backend/cpu/kernels-wasm.js';
import type { DType } from '../dtype.js';
import { createCpuBackend } from '../runtime.js';
import type { Tensor } from '../tensor.js';
import { seededValues } from '../testing/reference.js';
import { maskedFill, mul } from './elementwise.js';
import { scaledMaskedSoftmax } from './masked-softmax.js';
import { softmax } from './nn.js';
import { sum } from './reduce.js';
import { tensor } from './creation.js';

// [Note: attention's softmax in one call]: `scaledMaskedSoftmax` against the three ops it
// replaces, forward and backward, bit for bit, on the CPU backend's WASM kernels and its
// TypeScript ones, with causal masks repeating under the weights and masks of their own shape.
const wasm = createCpuBackend();
const typescript = createCpuBackend({ kernels: 'typescript' });

function bits(values: ArrayLike<number>, dtype: DType): number[] | bigint[] {
  if (dtype === 'f64') return [...new BigUint64Array(Float64Array.from(values).buffer)];
  return [...new Uint32Array(Float32Array.from(values).buffer)];
}

/** A causal mask [t, t] (1 above the diagonal), or random 0/1 of `shape` (no row all 1). */
function maskOf(backend: Backend, shape: number[], dtype: DType, causal: boolean): Tensor {
  const cols = shape[shape.length - 1]!;
  const n = shape.reduce((p, d) => p * d, 1);
  const values = causal
    ? Array.from({ length: n }, (_, i) => (i % cols > Math.floor(i / cols) % cols ? 1 : 0))
    : seededValues(n, n, 0, 1).map((v, i) => (i % cols !== 0 && v > 0.6 ? 1 : 0));
  return tensor(values, { backend, shape, dtype });
}

/** Forward output and x's gradient (loss sum(y w)), by the fused op or by the ops. */
async function run(
  backend: Backend,
  shape: number[],
  maskShape: number[],
  dtype: DType,
  scale: number,
  fused: boolean,
) {
  const n = shape.reduce((p, d) => p * d, 1);
  const x = tensor(seededValues(n, 3, -5, 5), { backend, shape, dtype });
  x.requiresGrad = true;
  const w = tensor(seededValues(n, 4, -2, 2), { backend, shape, dtype });
  const mask = maskOf(backend, maskShape, dtype, maskShape.length === 2 && shape.length > 2);
  const y = fused
    ? scaledMaskedSoftmax(x, mask, scale)
    : softmax(maskedFill(mul(x, scale), mask, Number.NEGATIVE_INFINITY), -1);
  await sum(mul(y, w)).backward();
  return { y: bits(await y.read(), dtype), dx: bits(await x.grad!.read(), dtype) };
}

describe('scaledMaskedSoftmax', () => {
  const cases: [number[], number[]][] = [
    [
      [2, 3, 4, 4],
      [4, 4],
    ],
    [
      [3, 2, 5, 5],
      [5, 5],
    ],
    [
      [1, 2, 33, 33],
      [33, 33],
    ],
    [
      [4, 7],
      [4, 7],
    ],
    [
      [2, 3, 9],
      [3, 9],
    ],
  ];
  for (const [name, backend] of [
    ['WASM', wasm],
    ['TypeScript', typescript],
  ] as const) {
    for (const dtype of ['f32', 'f64', 'bf16'] as DType[]) {
      it(`gives the bits of mul, maskedFill and softmax, both ways: ${name} kernels, ${dtype}`, async () => {
        for (const [shape, maskShape] of cases) {
          // 1/4 is an f32 (f32 lanes), 1/sqrt(12) is not (f64 lanes), as `mul` picks.
          for (const scale of [0.25, 1 / Math.sqrt(12)]) {
            const fused = await run(backend, shape, maskShape, dtype, scale, true);
            const ops = await run(backend, shape, maskShape, dtype, scale, false);
            expect(fused).toEqual(ops);
          }
        }
      });
    }
  }

  it('is one kernel each way on the CPU backend, where the ops were six', async () => {
    const calls: string[] = [];
    const methods = ['binary', 'where', 'softmax', 'softmaxBackward'];
    const fused = ['scaledMaskedSoftmax', 'scaledMaskedSoftmaxBackward'];
    const target = wasm as unknown as Record<string, (...args: unknown[]) => unknown>;
    for (const name of [...methods, ...fused]) {
      const original = target[name]!.bind(wasm);
      target[name] = (...args: unknown[]) => {
        calls.push(name);
        return original(...args);
      };
    }
    try {
      const x = tensor(seededValues(2 * 4 * 8 * 8, 9, -3, 3), {
        backend: wasm,
        shape: [2, 4, 8, 8],
      });
      x.requiresGrad = true;
      const y = scaledMaskedSoftmax(x, maskOf(wasm, [8, 8], 'f32', true), 0.125);
      expect(calls).toEqual(['scaledMaskedSoftmax']);
      calls.length = 0;
      const g = tensor(seededValues(512, 10, -1, 1), { backend: wasm, shape: [2, 4, 8, 8] });
      await y.backward(g);
      expect(calls).toEqual(['scaledMaskedSoftmaxBackward']);
    } finally {
      for (const name of [...methods, ...fused]) delete target[name];
    }
  });

  it('runs in pieces of whole masks that fit what the WASM kernels keep, with the same bits', async () => {
    // [Note: the WASM kernels' memory], with 1 MiB kept instead of 64: 1.2 MB of weights.
    const small = loadWasmKernels(undefined, 2 ** 20)!;
    const whole = loadWasmKernels()!;
    const shape = [75, 4, 32, 32];
    const n = 307_200;
    const k = (t: Tensor): KernelTensor => t.kernel('test');
    const x = tensor(seededValues(n, 20, -4, 4), { backend: wasm, shape });
    const dy = tensor(seededValues(n, 21, -1, 1), { backend: wasm, shape });
    const mask = maskOf(wasm, [32, 32], 'f32', true);
    const outs = [0, 1, 2, 3].map(() => tensor(new Array(n).fill(0), { backend: wasm, shape }));
    expect(small.scaledMaskedSoftmax(k(x), k(mask), 0.25, k(outs[0]!))).toBe(true);
    expect(whole.scaledMaskedSoftmax(k(x), k(mask), 0.25, k(outs[1]!))).toBe(true);
    const y = outs[1]!;
    expect(small.scaledMaskedSoftmaxBackward(k(y), k(dy), k(mask), 0.25, k(outs[2]!))).toBe(true);
    expect(whole.scaledMaskedSoftmaxBackward(k(y), k(dy), k(mask), 0.25, k(outs[3]!))).toBe(true);
    expect(small.scratchBytes).toBeLessThanOrEqual(2 ** 20);
    const read = async (t: Tensor) => bits(await t.read(), 'f32');
    expect(await read(outs[0]!)).toEqual(await read(outs[1]!));
    expect(await read(outs[2]!)).toEqual(await read(outs[3]!));
    const reference = softmax(maskedFill(mul(x, 0.25), mask, Number.NEGATIVE_INFINITY), -1);
    expect(await read(outs[0]!)).toEqual(await read(reference));
  });

  it('declines a mask of one value per row, or not f32', () => {
    const kernels = loadWasmKernels()!;
    const t = (shape: number[], dtype: DType = 'f32') =>
      tensor(new Array(shape.reduce((p, d) => p * d, 1)).fill(0), { backend: wasm, shape, dtype });
    const x = t([2, 4, 6]);
    // [2, 4, 1] under [2, 4, 6]: one value per row, which `where_rows` does not take.
    expect(
      kernels.scaledMaskedSoftmax(x.kernel('t'), t([2, 4, 1]).kernel('t'), 1, x.kernel('t')),
    ).toBe(false);
    expect(
      kernels.scaledMaskedSoftmax(x.kernel('t'), t([4, 6], 'f64').kernel('t'), 1, x.kernel('t')),
    ).toBe(false);
    expect(
      kernels.scaledMaskedSoftmax(x.kernel('t'), t([4, 6]).kernel('t'), 1, x.kernel('t')),
    ).toBe(true);
  });
});
