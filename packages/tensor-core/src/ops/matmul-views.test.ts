import { describe, expect, it } from 'vitest';
import { ShapeError } from '../errors.js';
import { createCpuBackend } from '../runtime.js';
import { tensor } from './creation.js';
import { matmulViews } from './matmul-views.js';

const backend = createCpuBackend();
const eye = { offset: 0, shape: [2, 2], strides: [2, 1] };

describe('matmulViews', () => {
  it('leaves out elements outside its window zero', async () => {
    const a = tensor([1, 2, 3, 4], { backend, shape: [2, 2] });
    const b = tensor([5, 6, 7, 8], { backend, shape: [2, 2] });
    // [2, 2] product into the first two columns of a [2, 3] out.
    const out = matmulViews(a, eye, b, eye, [2, 3], { offset: 0, strides: [3, 1] });
    expect(Array.from(await out.read())).toEqual([19, 22, 0, 43, 50, 0]);
  });

  it('refuses views past their tensor, unequal batch dims and out views that repeat elements', () => {
    const a = tensor([1, 2, 3, 4], { backend, shape: [2, 2] });
    const past = { offset: 1, shape: [2, 2], strides: [2, 1] };
    expect(() => matmulViews(a, past, a, eye, [2, 2], eye)).toThrow(ShapeError);
    expect(() => matmulViews(a, past, a, eye, [2, 2], eye)).toThrow(
      '[matmulViews] a view (offset 1, shape [2, 2], strides [2, 1]) reaches element 4 of 4',
    );
    const batched = { offset: 0, shape: [2, 1, 2], strides: [2, 2, 1] };
    expect(() => matmulViews(a, batched, a, eye, [2, 2], eye)).toThrow(
      '[matmulViews] views must be [...batch, m, k] and [...batch, k, n] with the same batch dims',
    );
    expect(() => matmulViews(a, eye, a, eye, [2, 2], { offset: 0, strides: [1, 1] })).toThrow(
      '[matmulViews] the out view repeats elements',
    );
  });

  it('gives the same gradients through the fallback (copies, matmul, add), a repeated matrix included', async () => {
    // A backend without matmulStrided: the ops' fallback, whose accumulation of a matrix that
    // repeats over the batch (a's stride 0) goes one batch element at a time.
    const fallback = new Proxy(backend, {
      get: (target, name) =>
        name === 'matmulStrided' ? undefined : Reflect.get(target, name, target),
    });
    const grads = async (on: typeof backend) => {
      const a = tensor([0.5, -1, 2, 0.25], { backend: on, shape: [2, 2] });
      const b = tensor([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], { backend: on, shape: [3, 2, 2] });
      a.requiresGrad = true;
      b.requiresGrad = true;
      const repeated = { offset: 0, shape: [3, 2, 2], strides: [0, 2, 1] };
      const each = { offset: 0, shape: [3, 2, 2], strides: [4, 2, 1] };
      const out = matmulViews(a, repeated, b, each, [3, 2, 2], { offset: 0, strides: [4, 1, 2] });
      const g = tensor([1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12], {
        backend: on,
        shape: [3, 2, 2],
      });
      await out.backward(g);
      return [Array.from(await a.grad!.read()), Array.from(await b.grad!.read())];
    };
    const expected = await grads(backend);
    // In float64 (every value here is exact in f32): out_p[i][j] is stored at 4p + i + 2j, so
    // G_p[i][j] = g[4p + i + 2j]; dA = sum over p of G_p B_p^T, dB_p = A^T G_p.
    const av = [0.5, -1, 2, 0.25];
    const bv = Array.from({ length: 12 }, (_, i) => i + 1);
    const gv = Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? i + 1 : -(i + 1)));
    const G = (p: number, i: number, j: number) => gv[4 * p + i + 2 * j]!;
    const dA = [0, 0, 0, 0];
    const dB = new Array<number>(12).fill(0);
    for (let p = 0; p < 3; p++) {
      for (let i = 0; i < 2; i++) {
        for (let j = 0; j < 2; j++) {
          for (let t = 0; t < 2; t++) {
            dA[i * 2 + t]! += G(p, i, j) * bv[4 * p + t * 2 + j]!;
            dB[4 * p + t * 2 + j]! += av[i * 2 + t]! * G(p, i, j);
          }
        }
      }
    }
    expect(expected).toEqual([dA, dB]);
    expect(await grads(fallback as typeof backend)).toEqual(expected);
  });
});
