import { describe, expect, it, vi } from 'vitest';
import { currentAutocastScope } from '../autocast-state.js';
import { checkpoint } from '../autograd/checkpoint.js';
import { noGrad } from '../autograd/grad-mode.js';
import { DTypeError } from '../errors.js';
import {
  add,
  cast,
  concat,
  copy_,
  crossEntropy,
  exp,
  gelu,
  layerNorm,
  linear,
  logSoftmax,
  matmul,
  mean,
  mseLoss,
  mul,
  softmax,
  sum,
  tensor,
  where,
} from '../ops/index.js';
import { Sequential } from '../nn/containers.js';
import { GELU, Linear } from '../nn/layers.js';
import { SGD } from '../optim/sgd.js';
import { RandomGenerator } from '../random/generator.js';
import { createCpuBackend } from '../runtime.js';
import type { Tensor } from '../tensor.js';
import { describeBackends } from '../testing/describe-backends.js';
import { autocast, clearAutocastCache, isAutocastEnabled } from './autocast.js';
import { GradScaler } from './grad-scaler.js';

function leaf(t: Tensor): Tensor {
  t.requiresGrad = true;
  return t;
}

async function values(t: Tensor | null): Promise<number[]> {
  return [...(await t!.read())];
}

describeBackends('autocast op policy', (ctx) => {
  it("runs PyTorch's CUDA lists by default: matmul and linear low, softmax, norms, sums, losses f32", () => {
    const { backend } = ctx;
    const x = tensor(
      [
        [1, 2, 3, 4],
        [-1, 0.5, 2, -3],
      ],
      { backend },
    );
    const w = leaf(
      tensor(
        [
          [0.1, 0.2, 0.3, 0.4],
          [0.5, -0.5, 0.25, 1],
        ],
        { backend },
      ),
    );
    const b = leaf(tensor([0.5, -1], { backend }));
    const ln = tensor([1, 1], { backend });
    for (const dtype of ['bf16', 'f16'] as const) {
      autocast({ dtype }, () => {
        const y = linear(x, w, b);
        expect(y.dtype).toBe(dtype);
        expect(matmul(x, w, { transposeB: true }).dtype).toBe(dtype);
        expect(softmax(y).dtype).toBe('f32');
        expect(logSoftmax(y).dtype).toBe('f32');
        expect(layerNorm(y, { weight: ln, bias: ln }).dtype).toBe('f32');
        expect(sum(y).dtype).toBe('f32');
        expect(exp(y).dtype).toBe('f32');
        expect(
          mseLoss(
            y,
            tensor(
              [
                [0, 0],
                [0, 0],
              ],
              { backend },
            ),
          ).dtype,
        ).toBe('f32');
        expect(crossEntropy(y, tensor([0, 1], { backend, dtype: 'i32' })).dtype).toBe('f32');
        // Not listed: the input's dtype, or the widest of several (PyTorch's type promotion).
        expect(gelu(y).dtype).toBe(dtype);
        expect(mean(y).dtype).toBe(dtype);
        expect(mul(y, 2).dtype).toBe(dtype);
        expect(add(y, b).dtype).toBe('f32');
        expect(concat([y, x.view([2, 2], 0)]).dtype).toBe('f32');
        expect(where(tensor([1, 0], { backend }), y, b).dtype).toBe('f32');
      });
    }
  });

  it("follows torch.autocast('cpu')'s shorter lists with deviceType 'cpu' (bf16 by default)", () => {
    const { backend } = ctx;
    const x = tensor(
      [
        [1, 2],
        [3, 4],
      ],
      { backend },
    );
    const w = leaf(tensor([1, 1], { backend }));
    autocast({ deviceType: 'cpu' }, () => {
      const y = matmul(x, x);
      expect(y.dtype).toBe('bf16');
      expect(softmax(y).dtype).toBe('bf16');
      expect(sum(y).dtype).toBe('bf16');
      expect(exp(y).dtype).toBe('bf16');
      expect(layerNorm(y, { weight: w, bias: w }).dtype).toBe('bf16');
      expect(crossEntropy(y, tensor([0, 1], { backend, dtype: 'i32' })).dtype).toBe('f32');
    });
  });

  it('gives f32 leaves f32 gradients through the casts', async () => {
    const { backend } = ctx;
    const x = tensor(
      [
        [1, 2],
        [3, -1],
      ],
      { backend },
    );
    const w = leaf(
      tensor(
        [
          [0.5, -0.25],
          [1, 2],
        ],
        { backend },
      ),
    );
    const loss = autocast({ dtype: 'bf16' }, () => sum(matmul(x, w)));
    expect(loss.dtype).toBe('f32');
    await loss.backward();
    expect(w.grad!.dtype).toBe('f32');
    // d(sum(x @ w))/dw[k][n] = sum_m x[m][k]: exact in bf16.
    expect(await values(w.grad)).toEqual([4, 4, 1, 1]);
  });
});

describe('autocast scopes', () => {
  const backend = createCpuBackend();

  it('nests, restores the enclosing scope on return and on throw, and turns off with enabled: false', () => {
    const x = tensor(
      [
        [1, 2],
        [3, 4],
      ],
      { backend },
    );
    expect(isAutocastEnabled()).toBe(false);
    autocast({ dtype: 'bf16' }, () => {
      autocast({ dtype: 'f16' }, () => expect(matmul(x, x).dtype).toBe('f16'));
      expect(matmul(x, x).dtype).toBe('bf16');
      autocast({ enabled: false }, () => {
        expect(isAutocastEnabled()).toBe(false);
        expect(matmul(x, x).dtype).toBe('f32');
      });
      expect(() =>
        autocast({ dtype: 'f16' }, () => {
          throw new Error('boom');
        }),
      ).toThrow('boom');
      expect(matmul(x, x).dtype).toBe('bf16');
    });
    expect(isAutocastEnabled()).toBe(false);
    expect(matmul(x, x).dtype).toBe('f32');
    // Outside a scope, mixed dtypes are still an error.
    expect(() => add(cast(x, 'bf16'), x)).toThrow(DTypeError);
  });

  it('follows each async call chain: two chains in one thread keep their own scopes', async () => {
    const x = tensor(
      [
        [1, 2],
        [3, 4],
      ],
      { backend },
    );
    const tick = () => new Promise<void>((resolve) => setTimeout(resolve, 1));
    const seen: string[] = [];
    const chain = (dtype: 'f16' | 'bf16') =>
      autocast({ dtype }, async () => {
        for (let i = 0; i < 3; i++) {
          await tick();
          seen.push(`${dtype}:${matmul(x, x).dtype}`);
        }
      });
    await Promise.all([chain('f16'), chain('bf16'), tick()]);
    expect(seen.filter((s) => s === 'f16:f16' || s === 'bf16:bf16')).toHaveLength(6);
    expect(matmul(x, x).dtype).toBe('f32');
    await expect(
      autocast({ dtype: 'f16' }, async () => {
        await tick();
        throw new Error('async boom');
      }),
    ).rejects.toThrow('async boom');
    expect(isAutocastEnabled()).toBe(false);
  });

  it('casts a weight once per scope, frees the casts on leaving it, and clearAutocastCache recasts', async () => {
    const x = tensor(
      [
        [1, 2],
        [3, 4],
      ],
      { backend },
    );
    const w = leaf(
      tensor(
        [
          [1, 0],
          [0, 1],
        ],
        { backend },
      ),
    );
    const casts = vi.spyOn(backend, 'cast');
    let cached: Tensor | undefined;
    await autocast({ dtype: 'bf16' }, async () => {
      for (let i = 0; i < 3; i++) linear(x, w).free();
      // x is not a leaf that requires grad: cast for each op; w once.
      expect(casts).toHaveBeenCalledTimes(4);
      cached = currentAutocastScope()?.cache.get(w);
      expect(cached?.dtype).toBe('bf16');
      expect(autocast({ dtype: 'bf16' }, () => currentAutocastScope()?.cache.size)).toBe(1);
      // A weight written in place inside the scope keeps its stale cast, as in PyTorch...
      noGrad(() =>
        copy_(
          w,
          tensor(
            [
              [2, 0],
              [0, 2],
            ],
            { backend },
          ),
        ),
      );
      expect(await values(linear(x, w))).toEqual([1, 2, 3, 4]);
      // ... until the cache is cleared.
      clearAutocastCache();
      expect(await values(linear(x, w))).toEqual([2, 4, 6, 8]);
    });
    casts.mockRestore();
    expect(cached?.isFreed).toBe(true);
    expect(currentAutocastScope()).toBe(null);
    // A new scope casts again from the current values.
    noGrad(() =>
      copy_(
        w,
        tensor(
          [
            [3, 0],
            [0, 3],
          ],
          { backend },
        ),
      ),
    );
    expect(await values(autocast({ dtype: 'bf16' }, () => linear(x, w)))).toEqual([3, 6, 9, 12]);
  });

  it('runs backward inside a scope in the recorded dtypes, twice with one cached cast', async () => {
    const x = tensor(
      [
        [1, 2],
        [3, 4],
      ],
      { backend },
    );
    const w = leaf(
      tensor(
        [
          [1, 2],
          [3, 4],
        ],
        { backend },
      ),
    );
    await autocast({ dtype: 'bf16' }, async () => {
      for (let i = 0; i < 2; i++) {
        const loss = sum(linear(x, w));
        await loss.backward();
      }
    });
    // Two backwards accumulate: 2 * column sums of x.
    expect(w.grad!.dtype).toBe('f32');
    expect(await values(w.grad)).toEqual([8, 12, 8, 12]);
  });

  it('recomputes a checkpointed region in the forward scope, backward outside it', async () => {
    const x = tensor(
      [
        [0.3, -1.2],
        [2.5, 0.7],
      ],
      { backend },
    );
    const w1 = leaf(
      tensor(
        [
          [0.11, 0.27],
          [-0.6, 0.9],
        ],
        { backend },
      ),
    );
    const w2 = leaf(
      tensor(
        [
          [0.13, 0.29],
          [-0.7, 0.3],
        ],
        { backend },
      ),
    );
    const region = (t: Tensor) => softmax(gelu(linear(t, w1)));
    const grads: number[][] = [];
    for (const useCheckpoint of [false, true]) {
      const loss = autocast({ dtype: 'bf16' }, () => {
        const h = useCheckpoint ? checkpoint(region, x) : region(x);
        expect(h.dtype).toBe('f32');
        return sum(linear(h, w2));
      });
      await loss.backward();
      grads.push(await values(w1.grad));
      w1.grad = null;
      w2.grad = null;
    }
    expect(grads[1]).toEqual(grads[0]);
  });
});

describe('autocast with GradScaler', () => {
  it('trains an MLP in f16 with a scaled loss, following the f32 run', async () => {
    const backend = createCpuBackend();
    const x = tensor(
      [
        [0.1, 0.2, 0.3, 0.4],
        [1, 0, -1, 0],
        [0.5, -0.5, 0.5, -0.5],
        [-0.3, 0.8, 0.1, -0.9],
      ],
      { backend },
    );
    const y = tensor([0, 1, 2, 1], { backend, dtype: 'i32' });
    const run = async (mixed: boolean) => {
      const generator = new RandomGenerator(3);
      const model = new Sequential(
        new Linear(4, 16, { backend, generator }),
        new GELU(),
        new Linear(16, 3, { backend, generator }),
      );
      const optimizer = new SGD(model.parameters(), { lr: 0.5 });
      // A scale that overflows f16 gradients at first: the scaler skips and backs off.
      const scaler = new GradScaler({ initScale: 2 ** 20, enabled: mixed });
      const losses: number[] = [];
      const taken: boolean[] = [];
      for (let step = 0; step < 12; step++) {
        const loss = autocast({ dtype: 'f16', enabled: mixed }, () =>
          crossEntropy(model.call(x), y),
        );
        expect(loss.dtype).toBe('f32');
        await scaler.scale(loss).backward();
        for (const p of model.parameters()) expect(p.grad!.dtype).toBe('f32');
        taken.push(await scaler.step(optimizer));
        scaler.update();
        optimizer.zeroGrad();
        losses.push(await loss.item());
      }
      return { losses, taken, scale: scaler.getScale() };
    };
    const f32 = await run(false);
    const f16 = await run(true);
    expect(f16.taken).toEqual([false, false, ...new Array<boolean>(10).fill(true)]);
    expect(f16.scale).toBe(2 ** 18);
    expect(f16.losses.at(-1)!).toBeLessThan(f16.losses[0]! * 0.7);
    // The skipped steps put the f16 run two steps behind the f32 one.
    for (let i = 2; i < 12; i++) {
      expect(Math.abs(f16.losses[i]! - f32.losses[i - 2]!)).toBeLessThan(5e-3);
    }
  });
});
