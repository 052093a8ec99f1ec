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
});
