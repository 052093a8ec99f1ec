import { describe, expect, it } from 'vitest';
import {
  abs,
  add,
  batchedMatmul,
  cast,
  concat,
  crossEntropy,
  div,
  embedding,
  exp,
  expand,
  gelu,
  indexAdd,
  layerNorm,
  linear,
  log,
  logSoftmax,
  matmul,
  max,
  maximum,
  mean,
  min,
  minimum,
  mseLoss,
  mul,
  neg,
  permute,
  pow,
  reciprocal,
  relu,
  reshape,
  rsqrt,
  sigmoid,
  slice,
  softmax,
  sqrt,
  square,
  sub,
  sum,
  tanh,
  tensor,
  where,
} from '../ops/index.js';
import { attendHeads } from '../nn/attention.js';
import { headViews } from '../ops/attention-heads.js';
import { scaledMaskedSoftmax } from '../ops/masked-softmax.js';
import { type MatrixView, transposeView } from '../ops/matrix-views.js';
import { matmulViews } from '../ops/matmul-views.js';
import type { Backend, KernelTensor } from '../backend/backend.js';
import { createCpuBackend } from '../runtime.js';
import type { Tensor } from '../tensor.js';
import { gradcheck } from './gradcheck.js';
import { noGrad } from './grad-mode.js';
import { gradients } from './gradients.js';

const backend = createCpuBackend();

/** Deterministic f64 values in [lo, hi), away from 0 when `avoidZero`. */
function input(shape: number[], seed: number, lo = -1, hi = 1, requiresGrad = true): Tensor {
  const n = shape.reduce((p, d) => p * d, 1);
  const values: number[] = [];
  for (let i = 0; i < n; i++) {
    const u = (Math.sin(seed * 97.31 + i * 12.9898) * 43758.5453) % 1;
    values.push(lo + (hi - lo) * Math.abs(u));
  }
  const t = tensor(values, { dtype: 'f64', backend, shape });
  t.requiresGrad = requiresGrad;
  return t;
}

function ids(values: number[], shape = [values.length]): Tensor {
  return tensor(new Int32Array(values), { backend, shape });
}

/** The full Jacobian of `fn` (every output element against every input element) is checked. */
async function check(fn: (...xs: Tensor[]) => Tensor, inputs: Tensor[]): Promise<void> {
  const out = noGrad(() => fn(...inputs));
  const outputs = out.size;
  out.free();
  const { checked, mode } = await gradcheck(fn, inputs);
  expect(mode).toBe('jacobian');
  expect(checked).toBe(
    outputs * inputs.filter((x) => x.requiresGrad).reduce((p, x) => p + x.size, 0),
  );
}

const cases: Record<string, () => Promise<void>> = {
  neg: () => check(neg, [input([2, 3], 1)]),
  abs: async () => {
    await check(abs, [input([2, 3], 2, 0.1, 1)]);
    await check(abs, [input([3], 3, -1, -0.1)]);
  },
  exp: () => check(exp, [input([2, 3], 4)]),
  log: () => check(log, [input([5], 5, 0.2, 2)]),
  sqrt: () => check(sqrt, [input([5], 6, 0.2, 2)]),
  rsqrt: () => check(rsqrt, [input([5], 7, 0.2, 2)]),
  tanh: () => check(tanh, [input([2, 3], 8)]),
  sigmoid: () => check(sigmoid, [input([2, 3], 9)]),
  relu: () => check(relu, [input([2, 4], 10)]),
  square: () => check(square, [input([2, 3], 11)]),
  reciprocal: () => check(reciprocal, [input([4], 12, 0.3, 2)]),
  gelu: async () => {
    await check((x) => gelu(x), [input([2, 3], 13, -2, 2)]);
    await check((x) => gelu(x, { approximate: 'tanh' }), [input([2, 3], 14, -2, 2)]);
  },
  add: async () => {
    await check(add, [input([2, 3], 15), input([3], 16)]);
    await check(add, [input([2, 1, 3], 17), input([4, 1], 18)]);
    await check((x) => add(x, 2.5), [input([3], 19)]);
    await check((x) => add(2.5, x), [input([3], 20)]);
  },
  mul: async () => {
    await check(mul, [input([2, 3], 21), input([2, 1], 22)]);
    await check((x) => mul(x, -3), [input([3], 23)]);
    await check((x) => mul(0.5, x), [input([3], 24)]);
  },
  div: async () => {
    await check(div, [input([2, 3], 25), input([3], 26, 0.5, 2)]);
    await check((x) => div(x, 4), [input([3], 27)]);
    await check((x) => div(2, x), [input([3], 28, 0.5, 2)]);
  },
  pow: async () => {
    await check(pow, [input([2, 3], 29, 0.5, 2), input([3], 30, -1, 2)]);
    await check((x) => pow(x, 3), [input([3], 31)]);
    await check((x) => pow(2, x), [input([3], 32)]);
  },
  maximum: async () => {
    await check(maximum, [input([2, 3], 33), input([3], 34)]);
    await check((x) => maximum(x, 0.2), [input([4], 35)]);
  },
  minimum: async () => {
    await check(minimum, [input([2, 3], 36), input([2, 3], 37)]);
    await check((x) => minimum(0.1, x), [input([4], 38)]);
  },
  where: async () => {
    const cond = tensor([1, 0, 1, 0, 0, 1], { dtype: 'f64', backend, shape: [2, 3] });
    await check((a, b) => where(cond, a!, b!), [input([2, 3], 39), input([3], 40)]);
    await check((a) => where(cond, a!, 7), [input([1, 3], 41)]);
  },
  sum: async () => {
    await check((x) => sum(x), [input([2, 3, 2], 42)]);
    await check((x) => sum(x, [0, 2]), [input([2, 3, 2], 43)]);
    await check((x) => sum(x, 1, { keepDim: true }), [input([2, 3, 2], 44)]);
  },
  max: async () => {
    await check((x) => max(x, 1), [input([3, 4], 45)]);
    await check((x) => max(x), [input([3, 4], 46)]);
  },
  min: () => check((x) => min(x, 0, { keepDim: true }), [input([3, 4], 47)]),
  softmax: async () => {
    await check((x) => softmax(x), [input([2, 5], 48, -2, 2)]);
    await check((x) => softmax(x, 0), [input([3, 2], 49, -2, 2)]);
  },
  logSoftmax: () => check((x) => logSoftmax(x), [input([3, 4], 50, -2, 2)]),
  scaledMaskedSoftmax: async () => {
    // A causal mask repeating under [2, 3, 3], and one of x's own shape (no row all masked).
    const causal = tensor([0, 1, 1, 0, 0, 1, 0, 0, 0], { dtype: 'f64', backend, shape: [3, 3] });
    await check((x) => scaledMaskedSoftmax(x, causal, 0.3), [input([2, 3, 3], 60, -2, 2)]);
    const own = tensor([0, 1, 0, 1, 0, 0, 0, 0], { dtype: 'f64', backend, shape: [2, 4] });
    await check((x) => scaledMaskedSoftmax(x, own, 1.7), [input([2, 4], 61, -2, 2)]);
  },
  layerNorm: async () => {
    await check(
      (x, w, b) => layerNorm(x!, { weight: w!, bias: b! }),
      [input([3, 5], 51, -2, 2), input([5], 52, 0.5, 1.5), input([5], 53)],
    );
    await check((x) => layerNorm(x!, { eps: 1e-3 }), [input([2, 2, 4], 54, -2, 2)]);
  },
  matmulViews: async () => {
    // Attention's heads: q and k^T windows of one qkv [B 2, T 3, 3C 6] (2 heads of 1), out [B, nh, T, T].
    const head = (part: number) => ({
      offset: part * 2,
      shape: [2, 2, 3, 1],
      strides: [18, 1, 6, 1],
    });
    const kT = { offset: 2, shape: [2, 2, 1, 3], strides: [18, 1, 1, 6] };
    const contiguous = { offset: 0, strides: [18, 9, 3, 1] };
    await check(
      (x) => matmulViews(x!, head(0), x!, kT, [2, 2, 3, 3], contiguous),
      [input([2, 3, 6], 63)],
    );
    // Two tensors: a's matrices transposed and its batch repeated (stride 0), out in a merged
    // layout ([2, 3, 2 x 2] written as [2, 2, 3, 2]) with a pad column left zero.
    await check(
      (a, b) =>
        matmulViews(
          a!,
          { offset: 1, shape: [2, 2, 3, 4], strides: [0, 0, 1, 3] },
          b!,
          { offset: 0, shape: [2, 2, 4, 2], strides: [16, 8, 2, 1] },
          [2, 3, 5],
          { offset: 0, strides: [15, 2, 5, 1] },
        ),
      [input([13], 64), input([2, 2, 4, 2], 65)],
    );
  },
  matmul: async () => {
    await check((a, b) => batchedMatmul(a!, b!), [input([2, 3, 4], 55), input([2, 4, 2], 56)]);
    await check(
      (a, b) => batchedMatmul(a!, b!, { transposeA: true }),
      [input([1, 4, 3], 57), input([2, 4, 2], 58)],
    );
    await check(
      (a, b) => batchedMatmul(a!, b!, { transposeB: true }),
      [input([2, 3, 4], 59), input([1, 2, 4], 60)],
    );
    await check(
      (a, b) => batchedMatmul(a!, b!, { transposeA: true, transposeB: true }),
      [input([2, 4, 3], 61), input([2, 2, 4], 62)],
    );
    // A broadcast weight (its gradient folds the batch into one matmul), both layouts.
    await check((a, b) => batchedMatmul(a!, b!), [input([3, 2, 4], 70), input([1, 4, 2], 71)]);
    // The composite: [B, T, C] @ W^T with a [out, in] weight, and a vector.
    await check(
      (x, w) => matmul(x!, w!, { transposeB: true }),
      [input([2, 3, 4], 63), input([5, 4], 64)],
    );
    await check((x, v) => matmul(x!, v!), [input([3, 4], 65), input([4], 66)]);
  },
  linear: async () => {
    // The CPU backend's `linear` kernel takes f32 only; for this f64 check the backend gets one of
    // its matmul and its add, so `linear` records the primitive whose gradient is checked.
    const shadow = backend as { linear?: Backend['linear'] };
    shadow.linear = (x, w, b, out) => {
      const [n, k] = w.shape as [number, number];
      const m = x.shape.reduce((p, d) => p * d, 1) / k;
      backend.matmul(
        { ...x, shape: [1, m, k] },
        { ...w, shape: [1, n, k] },
        { ...out, shape: [1, m, n] },
        false,
        true,
      );
      backend.binary('add', { ...out, shape: [m, n] }, b, { ...out, shape: [m, n] });
      return true;
    };
    try {
      const recorded = linear(input([2, 3], 90), input([5, 3], 91), input([5], 92));
      expect(recorded.gradFn?.name).toBe('linear');
      recorded.free();
      // [B, T, C] (the weight's gradient folded over B), a matrix, a vector, and a frozen weight.
      await check(
        (x, w, b) => linear(x!, w!, b!),
        [input([2, 3, 4], 93), input([5, 4], 94), input([5], 95)],
      );
      await check(
        (x, w, b) => linear(x!, w!, b!),
        [input([3, 4], 96), input([2, 4], 97), input([2], 98)],
      );
      await check(
        (x, w, b) => linear(x!, w!, b!),
        [input([4], 99), input([3, 4], 100), input([3], 101)],
      );
      await check(
        (x, b) => linear(x!, input([3, 4], 102, -1, 1, false), b!),
        [input([2, 2, 4], 103), input([3], 104)],
      );
    } finally {
      delete shadow.linear;
    }
  },
  attention: async () => {
    // The CPU backend's `attention` kernel takes f32 only; for this f64 check the backend gets
    // one of its own strided products and masked softmax, so `attendHeads` records the primitive
    // whose gradient is checked, and its `attentionBackward` declines (f64): the gradient's ops.
    const shadow = backend as { attention?: Backend['attention'] };
    shadow.attention = (qkv, mask, nHead, scale, y, att) => {
      const [b, t, c3] = qkv.shape as [number, number, number];
      const { head, square, merged } = headViews(b, t, c3 / 3, nHead);
      const at = (k: KernelTensor, v: MatrixView) => ({
        ...k,
        offset: k.offset + v.offset,
        strides: v.strides,
      });
      const hs = c3 / 3 / nHead;
      const kT = transposeView(head(1));
      backend.matmulStrided(
        at(qkv, head(0)),
        at(qkv, kT),
        at(att, square),
        [b, nHead],
        t,
        hs,
        t,
        false,
      );
      backend.scaledMaskedSoftmax(att, mask, scale, att);
      backend.matmulStrided(
        at(att, square),
        at(qkv, head(2)),
        at(y, merged),
        [b, nHead],
        t,
        t,
        hs,
        false,
      );
      return true;
    };
    try {
      const causal = tensor([0, 1, 1, 0, 0, 1, 0, 0, 0], { dtype: 'f64', backend, shape: [3, 3] });
      const recorded = attendHeads(input([2, 3, 12], 105), 2, causal);
      expect(recorded.gradFn?.name).toBe('attention');
      recorded.free();
      // B 2, T 3, 2 heads of 2; and one head of 3 with nothing masked.
      await check((qkv) => attendHeads(qkv!, 2, causal), [input([2, 3, 12], 106, -2, 2)]);
      const open = tensor(new Array<number>(4).fill(0), { dtype: 'f64', backend, shape: [2, 2] });
      await check((qkv) => attendHeads(qkv!, 1, open), [input([1, 2, 9], 107, -2, 2)]);
    } finally {
      delete shadow.attention;
    }
  },
  embedding: () =>
    check((w) => embedding(w!, ids([2, 0, 2, 1, 2, 3], [2, 3])), [input([4, 3], 67)]),
  indexAdd: () =>
    check((x, src) => indexAdd(x!, ids([1, 3, 1]), src!), [input([4, 2], 68), input([3, 2], 69)]),
  crossEntropy: async () => {
    const targets = ids([1, 0, -100, 3]);
    await check((x) => crossEntropy(x!, targets), [input([4, 5], 70, -2, 2)]);
    await check(
      (x) => crossEntropy(x!, targets, { reduction: 'none' }),
      [input([4, 5], 71, -2, 2)],
    );
  },
  reshape: () => check((x) => reshape(x!, [3, -1]), [input([2, 3, 2], 72)]),
  permute: () => check((x) => permute(x!, [2, 0, 1]), [input([2, 3, 4], 73)]),
  slice: () =>
    check((x) => slice(x!, [{ start: 1 }, { start: 0, end: 5, step: 2 }]), [input([3, 6], 74)]),
  concat: () => check((a, b) => concat([a!, b!], 1), [input([2, 3], 75), input([2, 2], 76)]),
  expand: () => check((x) => expand(x!, [2, 3, 4]), [input([3, 1], 77)]),
  cast: () => check((x) => cast(x!, 'f64'), [input([4], 78)]),
};

describe('gradients vs central finite differences (f64, cpu)', () => {
  it('covers every entry of the gradient table', () => {
    expect(Object.keys(cases).sort()).toEqual(Object.keys(gradients).sort());
  });

  for (const [op, run] of Object.entries(cases)) {
    it(op, run);
  }

  it('composites: sub, mean, mseLoss, softmax of a matmul', async () => {
    await check(sub, [input([2, 3], 79), input([3], 80)]);
    await check((x) => mean(x!, 1), [input([2, 3], 81)]);
    await check((x, y) => mseLoss(x!, y!), [input([2, 3], 82), input([2, 3], 83)]);
    await check((x, w) => softmax(matmul(x!, w!)), [input([2, 3], 84), input([3, 4], 85)]);
  });

  it('gradcheck catches a wrong gradient', async () => {
    const doubled = (x: Tensor): Tensor => {
      const y = exp(x);
      if (y.requiresGrad) y.registerHook((g) => mul(g, 2));
      return y;
    };
    await expect(gradcheck(doubled, [input([2], 86)])).rejects.toThrow(
      /\[gradcheck\] input 0 element 0, output element 0: analytic/,
    );
  });

  /** exp, with a gradient that also sends output 0's gradient to input 2 (a misplaced index). */
  const leaky = (x: Tensor): Tensor => {
    const y = exp(x);
    if (y.requiresGrad) {
      const route = tensor([1, 0, 1, 0, 1, 0, 0, 0, 1], { dtype: 'f64', backend, shape: [3, 3] });
      y.registerHook((g) => reshape(matmul(reshape(g, [1, 3]), route), [3]));
    }
    return y;
  };

  it('compares every Jacobian entry and names the wrong one', async () => {
    await expect(gradcheck(leaky, [input([3], 87)])).rejects.toThrow(
      /^\[gradcheck\] input 0 element 2, output element 0: analytic [\d.]+ vs numeric 0 /,
    );
    const { checked, mode, maxAbsError } = await gradcheck(exp, [input([3], 87)]);
    expect([checked, mode]).toEqual([9, 'jacobian']);
    expect(maxAbsError).toBeLessThan(1e-8);
  });

  it('checks large outputs through several seeded random projections', async () => {
    const options = { maxJacobianOutputs: 2, projections: 3 };
    const x = input([2, 3], 88);
    const result = await gradcheck((a) => softmax(a!), [x], options);
    expect([result.mode, result.checked]).toEqual(['projections', 3 * 6]);
    await expect(gradcheck(leaky, [input([3], 87)], options)).rejects.toThrow(
      /^\[gradcheck\] input 0 element 2, projection 0: /,
    );
    await expect(gradcheck(exp, [x], { projections: 0 })).rejects.toThrow(
      '[gradcheck] projections 0 is not a positive integer',
    );
    const f32 = tensor([1, 2], { backend });
    f32.requiresGrad = true;
    await expect(gradcheck(exp, [f32])).rejects.toThrow(/must be f64 for finite differences/);
  });

  it('splits ties evenly for max, maximum and minimum (as PyTorch)', async () => {
    const x = tensor([1, 3, 3, 2], { dtype: 'f64', backend });
    x.requiresGrad = true;
    await max(x).backward();
    expect([...(await x.grad!.read())]).toEqual([0, 0.5, 0.5, 0]);
    const a = tensor([1, 2], { dtype: 'f64', backend });
    const b = tensor([1, 3], { dtype: 'f64', backend });
    a.requiresGrad = true;
    b.requiresGrad = true;
    await sum(maximum(a, b)).backward();
    expect([...(await a.grad!.read())]).toEqual([0.5, 0]);
    expect([...(await b.grad!.read())]).toEqual([0.5, 1]);
  });
});
