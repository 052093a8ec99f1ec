import { describe, expect, it, vi } from 'vitest';
import { createCpuBackend } from '../runtime.js';
import { Tensor } from '../tensor.js';
import { clipGradNorm } from './clip-grad-norm.js';

// Expected numbers from PyTorch 1.13 (/usr/bin/python3):
//   a.grad = [3, 4]; b.grad = [[1, -2], [2, 0]]
//   torch.nn.utils.clip_grad_norm_([a, b], 2.0)                      -> 5.830951690673828
//   a.grad -> [1.028991460800171, 1.3719885349273682]
//   torch.nn.utils.clip_grad_norm_([a, b], 1.0, norm_type=inf)       -> 4.0
//   a.grad -> [0.7499998211860657, 0.9999997615814209]
const backend = createCpuBackend();

function param(shape: number[], grad: number[] | null): Tensor {
  const p = Tensor.empty(backend, shape);
  p.requiresGrad = true;
  if (grad) p.grad = Tensor.empty(backend, shape).write(grad);
  return p;
}

describe('clipGradNorm', () => {
  it('clips by the joint 2-norm like PyTorch', async () => {
    const a = param([2], [3, 4]);
    const b = param([2, 2], [1, -2, 2, 0]);
    const c = param([3], null);
    const total = await clipGradNorm([a, b, c], 2);
    expect(total).toBeCloseTo(5.830951690673828, 6);
    expect([...(await a.grad!.read())]).toEqual(
      [1.028991460800171, 1.3719885349273682].map(Math.fround),
    );
    const bg = await b.grad!.read();
    expect(bg[0]).toBeCloseTo(0.34299713373184204, 7);
    expect(bg[1]).toBeCloseTo(-0.6859942674636841, 7);
    expect(c.grad).toBeNull();
  });

  it('scales the gradients in place: no copy of any', async () => {
    const a = param([3, 2], [3, 4, 0, 1, -2, 2]);
    const grad = a.grad!;
    const copy = vi.spyOn(backend, 'copy');
    try {
      expect(await clipGradNorm([a], 1)).toBeCloseTo(Math.sqrt(34), 6);
      expect(copy).not.toHaveBeenCalled();
    } finally {
      copy.mockRestore();
    }
    expect(a.grad).toBe(grad);
    const coef = Math.fround(1 / (Math.fround(Math.sqrt(34)) + 1e-6));
    expect([...(await a.grad!.read())]).toEqual(
      [3, 4, 0, 1, -2, 2].map((g) => Math.fround(g * coef)),
    );
  });

  it('clips by the max norm', async () => {
    const a = param([2], [3, 4]);
    const b = param([2, 2], [1, -2, 2, 0]);
    expect(await clipGradNorm([a, b], 1, { normType: Number.POSITIVE_INFINITY })).toBe(4);
    expect([...(await a.grad!.read())]).toEqual(
      [0.7499998211860657, 0.9999997615814209].map(Math.fround),
    );
  });

  it('leaves gradients alone under the limit and handles a 3-norm', async () => {
    const a = param([3], [1, -2, 2]);
    const total = await clipGradNorm([a], 100, { normType: 3 });
    expect(total).toBeCloseTo((1 + 8 + 8) ** (1 / 3), 6);
    expect([...(await a.grad!.read())]).toEqual([1, -2, 2]);
  });

  it('combines partial sums of squares across ranks through reduceNorm', async () => {
    // Two "ranks" each hold half of the gradient [3, 4, 12]: rank 0 [3, 4], rank 1 [12].
    const seen: number[] = [];
    const reduce = async (local: number) => {
      seen.push(local);
      return 9 + 16 + 144;
    };
    const shard = param([2], [3, 4]);
    const total = await clipGradNorm([shard], 6.5, { reduceNorm: reduce });
    expect(seen).toEqual([25]);
    expect(total).toBe(13);
    const g = await shard.grad!.read();
    expect(g[0]).toBeCloseTo((3 * 6.5) / 13, 5);
    // A rank with no gradients still takes part in the collective.
    expect(await clipGradNorm([param([1], null)], 1, { reduceNorm: reduce })).toBe(13);
    expect(seen).toEqual([25, 0]);
  });

  it('reports a non-finite norm, or throws when asked to', async () => {
    const a = param([2], [Number.NaN, 1]);
    expect(await clipGradNorm([a], 1)).toBeNaN();
    const b = param([2], [Number.POSITIVE_INFINITY, 1]);
    await expect(clipGradNorm([b], 1, { errorIfNonfinite: true })).rejects.toThrow(
      '[clipGradNorm] the total norm of order 2 is Infinity: gradients are not finite',
    );
    await expect(clipGradNorm([b], 1, { normType: 0 })).rejects.toThrow(
      '[clipGradNorm] normType 0 must be positive',
    );
  });
});
