import { describe, expect, it } from 'vitest';
import type { Backend, KernelTensor } from '../backend/backend.js';
import { loadWasmKernels } from '../backend/cpu/kernels-wasm.js';
import type { DType } from '../dtype.js';
import { maskedFill, mul, softmax, sub, sum, tensor } from '../ops/index.js';
import { createCpuBackend } from '../runtime.js';
import type { Tensor } from '../tensor.js';
import { seededValues } from '../testing/reference.js';
import { softmaxGrad } from './gradients.js';

// [Note: softmax's gradient in one pass]: the CPU backend's `softmaxBackward` against the ops it
// replaces, bit for bit, on the WASM kernel and the TypeScript one, in f32 and f64, with rows of
// every tail length and masked (zero) weights as attention has; and autograd's use of it.
const wasm = createCpuBackend();
const typescript = createCpuBackend({ kernels: 'typescript' });

function bitsOf(values: ArrayLike<number>, dtype: DType): bigint[] | number[] {
  if (dtype === 'f64') return [...new BigUint64Array(Float64Array.from(values).buffer)];
  return [...new Uint32Array(Float32Array.from(values).buffer)];
}

/** Softmax weights with a causal mask's zeros (rows of several cols), and a gradient for them. */
function operands(backend: Backend, shape: number[], dtype: DType, seed: number) {
  const n = shape.reduce((p, d) => p * d, 1);
  const cols = shape[shape.length - 1]!;
  const logits = tensor(seededValues(n, seed, -6, 6), { backend, shape, dtype });
  const mask = tensor(
    Array.from({ length: n }, (_, i) => (i % cols > Math.floor(i / cols) % cols ? 1 : 0)),
    { backend, shape, dtype },
  );
  const y = softmax(maskedFill(logits, mask, Number.NEGATIVE_INFINITY));
  const dy = tensor(seededValues(n, seed + 1, -3, 3), { backend, shape, dtype });
  return { y, dy };
}

/** The ops `softmaxBackward` replaces, as the gradient table wrote them. */
function byOps(y: Tensor, dy: Tensor): Tensor {
  return mul(y, sub(dy, sum(mul(dy, y), -1, { keepDim: true })));
}

describe("softmax's gradient in one kernel", () => {
  const shapes = [
    [1, 1],
    [3, 5],
    [4, 4],
    [7, 32],
    [5, 33],
    [2, 3, 65],
    [2, 256],
  ];
  for (const [name, backend] of [
    ['WASM', wasm],
    ['TypeScript', typescript],
  ] as const) {
    for (const dtype of ['f32', 'f64'] as const) {
      it(`gives the bits of mul, sum, sub and mul: ${name} kernels, ${dtype}`, async () => {
        let seed = 11;
        for (const shape of shapes) {
          seed += 2;
          const { y, dy } = operands(backend, shape, dtype, seed);
          const dx = backend.softmaxBackward!.bind(backend);
          let calls = 0;
          backend.softmaxBackward = (...args) => {
            calls++;
            return dx(...args);
          };
          try {
            const fused = softmaxGrad(y, dy);
            expect(calls).toBe(1);
            const reference = byOps(y, dy);
            expect(bitsOf(await fused.read(), dtype)).toEqual(
              bitsOf(await reference.read(), dtype),
            );
          } finally {
            delete (backend as { softmaxBackward?: unknown }).softmaxBackward;
          }
        }
      });
    }
  }

  it('is what autograd runs for softmax on the CPU, with the bits of the ops', async () => {
    const shape = [4, 2, 9, 9];
    const x = tensor(seededValues(648, 3, -4, 4), { backend: wasm, shape, dtype: 'f32' });
    x.requiresGrad = true;
    const w = tensor(seededValues(648, 4, -2, 2), { backend: wasm, shape, dtype: 'f32' });
    const calls: string[] = [];
    const original = wasm.softmaxBackward.bind(wasm);
    wasm.softmaxBackward = (...args) => {
      calls.push(args[0].shape.join('x'));
      return original(...args);
    };
    try {
      const y = softmax(x);
      await sum(mul(y, w)).backward();
      expect(calls).toEqual(['4x2x9x9']);
      // d sum(y w) / dy is w itself: the gradient is the ops' on (y, w).
      expect(bitsOf(await x.grad!.read(), 'f32')).toEqual(bitsOf(await byOps(y, w).read(), 'f32'));
    } finally {
      delete (wasm as { softmaxBackward?: unknown }).softmaxBackward;
    }
  });

  it('declines f16 and bf16, whose ops round at every step, and they take the ops', async () => {
    for (const dtype of ['f16', 'bf16'] as const) {
      const { y, dy } = operands(wasm, [3, 6], dtype, 40);
      const out = tensor(new Array(18).fill(0), { backend: wasm, shape: [3, 6], dtype });
      expect(wasm.softmaxBackward(y.kernel('test'), dy.kernel('test'), out.kernel('test'))).toBe(
        false,
      );
      expect(bitsOf(await softmaxGrad(y, dy).read(), 'f32')).toEqual(
        bitsOf(await byOps(y, dy).read(), 'f32'),
      );
    }
  });

  it('runs rows in pieces that fit what the WASM kernels keep, with the same bits', async () => {
    // [Note: the WASM kernels' memory], with 1 MiB kept instead of 64: 3 arrays of 1.2 MB.
    const small = loadWasmKernels(undefined, 2 ** 20)!;
    const whole = loadWasmKernels()!;
    const { y, dy } = operands(wasm, [300, 1000], 'f32', 50);
    const outs = [0, 1].map(() =>
      tensor(new Array(300_000).fill(0), { backend: wasm, shape: [300, 1000], dtype: 'f32' }),
    );
    const k = (t: Tensor): KernelTensor => t.kernel('test');
    expect(small.softmaxBackward(k(y), k(dy), k(outs[0]!))).toBe(true);
    expect(whole.softmaxBackward(k(y), k(dy), k(outs[1]!))).toBe(true);
    expect(small.scratchBytes).toBeLessThanOrEqual(2 ** 20);
    const [a, b] = await Promise.all(outs.map((t) => t.read()));
    expect(bitsOf(a!, 'f32')).toEqual(bitsOf(b!, 'f32'));
    expect(bitsOf(a!, 'f32')).toEqual(bitsOf(await byOps(y, dy).read(), 'f32'));
  });
});
