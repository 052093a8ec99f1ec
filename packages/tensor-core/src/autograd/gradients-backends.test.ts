import { expect, it } from 'vitest';
import type { Backend } from '../backend/backend.js';
import type { DType } from '../dtype.js';
import * as ops from '../ops/index.js';
import { attendHeads } from '../nn/attention.js';
import { scaledMaskedSoftmax } from '../ops/masked-softmax.js';
import { matmulViews } from '../ops/matmul-views.js';
import { transposeView } from '../ops/matrix-views.js';
import { createCpuBackend } from '../runtime.js';
import type { Tensor } from '../tensor.js';
import { describeBackends } from '../testing/describe-backends.js';
import { expectClose } from '../testing/tolerance.js';
import { gradients } from './gradients.js';

/**
 * Every gradient of the table on each registered backend, in f32, against the CPU backend: the
 * same inputs, the same loss sum(out * w), gradients compared elementwise. (The CPU backend's
 * gradients are themselves checked against finite differences in f64 in gradients.test.ts.)
 */
type Make = (values: number[], shape: number[], dtype?: DType) => Tensor;
interface Case {
  inputs: { shape: number[]; lo?: number; hi?: number }[];
  fn: (xs: Tensor[], make: Make) => Tensor;
}

const cases: Record<string, Case> = {
  neg: { inputs: [{ shape: [2, 3] }], fn: ([x]) => ops.neg(x!) },
  abs: { inputs: [{ shape: [2, 3] }], fn: ([x]) => ops.abs(x!) },
  exp: { inputs: [{ shape: [2, 3] }], fn: ([x]) => ops.exp(x!) },
  log: { inputs: [{ shape: [5], lo: 0.2, hi: 2 }], fn: ([x]) => ops.log(x!) },
  sqrt: { inputs: [{ shape: [5], lo: 0.2, hi: 2 }], fn: ([x]) => ops.sqrt(x!) },
  rsqrt: { inputs: [{ shape: [5], lo: 0.2, hi: 2 }], fn: ([x]) => ops.rsqrt(x!) },
  tanh: { inputs: [{ shape: [2, 3] }], fn: ([x]) => ops.tanh(x!) },
  sigmoid: { inputs: [{ shape: [2, 3] }], fn: ([x]) => ops.sigmoid(x!) },
  relu: { inputs: [{ shape: [2, 4] }], fn: ([x]) => ops.relu(x!) },
  square: { inputs: [{ shape: [2, 3] }], fn: ([x]) => ops.square(x!) },
  reciprocal: { inputs: [{ shape: [4], lo: 0.3, hi: 2 }], fn: ([x]) => ops.reciprocal(x!) },
  gelu: {
    inputs: [
      { shape: [2, 3], lo: -2, hi: 2 },
      { shape: [3], lo: -2, hi: 2 },
    ],
    fn: ([x, y]) => ops.add(ops.gelu(x!), ops.gelu(y!, { approximate: 'tanh' })),
  },
  add: { inputs: [{ shape: [2, 1, 3] }, { shape: [4, 1] }], fn: ([a, b]) => ops.add(a!, b!) },
  mul: { inputs: [{ shape: [2, 3] }, { shape: [2, 1] }], fn: ([a, b]) => ops.mul(a!, b!) },
  div: {
    inputs: [{ shape: [2, 3] }, { shape: [3], lo: 0.5, hi: 2 }],
    fn: ([a, b]) => ops.div(a!, b!),
  },
  pow: {
    inputs: [{ shape: [2, 3], lo: 0.5, hi: 2 }, { shape: [3] }],
    fn: ([a, b]) => ops.pow(a!, b!),
  },
  maximum: { inputs: [{ shape: [2, 3] }, { shape: [3] }], fn: ([a, b]) => ops.maximum(a!, b!) },
  minimum: { inputs: [{ shape: [2, 3] }, { shape: [2, 3] }], fn: ([a, b]) => ops.minimum(a!, b!) },
  where: {
    inputs: [{ shape: [2, 3] }, { shape: [3] }],
    fn: ([a, b], make) => ops.where(make([1, 0, 1, 0, 0, 1], [2, 3]), a!, b!),
  },
  sum: { inputs: [{ shape: [2, 3, 2] }], fn: ([x]) => ops.sum(x!, [0, 2]) },
  max: { inputs: [{ shape: [3, 4] }], fn: ([x]) => ops.max(x!, 1) },
  min: { inputs: [{ shape: [3, 4] }], fn: ([x]) => ops.min(x!, 0, { keepDim: true }) },
  softmax: { inputs: [{ shape: [2, 5], lo: -2, hi: 2 }], fn: ([x]) => ops.softmax(x!) },
  logSoftmax: { inputs: [{ shape: [3, 4], lo: -2, hi: 2 }], fn: ([x]) => ops.logSoftmax(x!) },
  scaledMaskedSoftmax: {
    inputs: [{ shape: [2, 3, 3], lo: -2, hi: 2 }],
    fn: ([x], make) =>
      scaledMaskedSoftmax(x!, make([0, 1, 1, 0, 0, 1, 0, 0, 0], [3, 3]), 1 / Math.sqrt(3)),
  },
  layerNorm: {
    inputs: [{ shape: [3, 5], lo: -2, hi: 2 }, { shape: [5], lo: 0.5, hi: 1.5 }, { shape: [5] }],
    fn: ([x, w, b]) => ops.layerNorm(x!, { weight: w!, bias: b! }),
  },
  matmul: {
    inputs: [{ shape: [2, 3, 4] }, { shape: [1, 2, 4] }],
    fn: ([a, b]) => ops.batchedMatmul(a!, b!, { transposeB: true }),
  },
  linear: {
    // On the CPU backend the `linear` kernel (f32, k within one gemm block); elsewhere the ops.
    inputs: [{ shape: [2, 3, 4] }, { shape: [5, 4] }, { shape: [5] }],
    fn: ([x, w, b]) => ops.linear(x!, w!, b!),
  },
  attention: {
    // Causal attention over 2 heads of 4 (T 4): on the CPU backend its one-call kernel
    // ([Note: attention's heads in one call]); elsewhere the strided products.
    inputs: [{ shape: [2, 4, 24] }],
    fn: ([qkv], make) => {
      const mask = make([0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0], [4, 4]);
      return attendHeads(qkv!, 2, mask);
    },
  },
  matmulViews: {
    // Attention's shape: q k^T from one qkv [2, 3, 3 x 4] (2 heads of 2), then att v merged.
    inputs: [{ shape: [2, 3, 12] }, { shape: [2, 2, 3, 3] }],
    fn: ([qkv, att]) => {
      const head = (part: number) => ({
        offset: part * 4,
        shape: [2, 2, 3, 2],
        strides: [36, 2, 12, 1],
      });
      const scores = matmulViews(qkv!, head(0), qkv!, transposeView(head(1)), [2, 2, 3, 3], {
        offset: 0,
        strides: [18, 9, 3, 1],
      });
      const weights = ops.mul(scores, att!);
      const attView = { offset: 0, shape: [2, 2, 3, 3], strides: [18, 9, 3, 1] };
      return matmulViews(weights, attView, qkv!, head(2), [2, 3, 4], {
        offset: 0,
        strides: [12, 2, 4, 1],
      });
    },
  },
  embedding: {
    inputs: [{ shape: [4, 3] }],
    fn: ([w], make) => ops.embedding(w!, make([2, 0, 2, 1, 2, 3], [2, 3], 'i32')),
  },
  indexAdd: {
    inputs: [{ shape: [4, 2] }, { shape: [3, 2] }],
    fn: ([x, src], make) => ops.indexAdd(x!, make([1, 3, 1], [3], 'i32'), src!),
  },
  crossEntropy: {
    inputs: [{ shape: [4, 5], lo: -2, hi: 2 }],
    fn: ([x], make) => ops.crossEntropy(x!, make([1, 0, -100, 3], [4], 'i32')),
  },
  reshape: { inputs: [{ shape: [2, 3, 2] }], fn: ([x]) => ops.reshape(x!, [3, -1]) },
  permute: { inputs: [{ shape: [2, 3, 4] }], fn: ([x]) => ops.permute(x!, [2, 0, 1]) },
  slice: {
    inputs: [{ shape: [3, 6] }],
    fn: ([x]) => ops.slice(x!, [{ start: 1 }, { start: 0, end: 5, step: 2 }]),
  },
  concat: {
    inputs: [{ shape: [2, 3] }, { shape: [2, 2] }],
    fn: ([a, b]) => ops.concat([a!, b!], 1),
  },
  expand: { inputs: [{ shape: [3, 1] }], fn: ([x]) => ops.expand(x!, [2, 3, 4]) },
  cast: {
    inputs: [{ shape: [4] }],
    fn: ([x]) => ops.cast(ops.cast(x!, 'f16'), 'f32'),
  },
};

function seeded(n: number, seed: number, lo: number, hi: number): number[] {
  return Array.from({ length: n }, (_, i) => {
    const u = Math.abs((Math.sin(seed * 97.31 + i * 12.9898) * 43758.5453) % 1);
    return lo + (hi - lo) * u;
  });
}

async function gradsOn(backend: Backend, c: Case): Promise<number[][]> {
  const make: Make = (values, shape, dtype = 'f32') =>
    ops.tensor(dtype === 'i32' ? new Int32Array(values) : values, { backend, dtype, shape });
  const xs = c.inputs.map((spec, k) => {
    const n = spec.shape.reduce((p, d) => p * d, 1);
    const t = make(seeded(n, k + 1, spec.lo ?? -1, spec.hi ?? 1), spec.shape);
    t.requiresGrad = true;
    return t;
  });
  const out = c.fn(xs, make);
  const w = make(seeded(out.size, 99, 0.5, 1.5), [...out.shape]);
  await ops.sum(ops.mul(out, w)).backward();
  return Promise.all(xs.map(async (x) => [...(await x.grad!.read())]));
}

const reference = createCpuBackend();

// The WebGPU suite is skipped only where no WebGPU adapter is likely (no `webgpu` package, no
// Vulkan driver, no SwiftShader: testing/describe-backends.ts prints which); CI sets
// WEBSHARD_REQUIRE_WEBGPU=1, which turns that skip into an error, so CI always runs it.
describeBackends('gradients vs the CPU backend (f32)', (ctx) => {
  it('covers every entry of the gradient table', () => {
    expect(Object.keys(cases).sort()).toEqual(Object.keys(gradients).sort());
  });

  for (const [op, c] of Object.entries(cases)) {
    it(op, async () => {
      const expected = await gradsOn(reference, c);
      const actual = await gradsOn(ctx.backend, c);
      actual.forEach((g, i) => {
        expectClose(g, expected[i]!, { rtol: 1e-4, atol: 1e-5 });
      });
    });
  }
});
