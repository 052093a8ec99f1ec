import {
  activationGrad,
  add,
  batchedMatmul,
  cast,
  div,
  embedding,
  eq,
  exp,
  expand,
  gt,
  log,
  lt,
  mul,
  neg,
  pow,
  reshape,
  scatterAdd,
  sub,
  sum,
  where,
} from '../ops/index.js';
import { shapeSize, Tensor } from '../tensor.js';
import { attentionGradient } from './attention-gradient.js';
import { foldedWeightGrad, foldsWeightGrad } from './folded-weight-grad.js';
import { layoutGradients, reduceTo } from './layout-gradients.js';
import { linearGradient } from './linear-gradient.js';
import { matmulViewsGradient } from './matmul-views-gradient.js';
import { scaledMaskedSoftmaxGradByKernel, softmaxGradByKernel } from './softmax-gradient.js';
import type { GradContext, GradientDef } from './node.js';

/**
 * [Note: the gradient table]
 * One entry per differentiable primitive of the ops layer (the table at the top of
 * `src/ops/index.ts`), nothing else: composites (sub, mean, softmax over another axis, matmul's
 * batching, cross entropy's reductions, mse) get their gradients from their primitives. Each
 * entry names what it saves and maps output gradients to input gradients with ops (run under
 * `noGrad` inside `tidy`, so temporaries are freed). Every entry is checked against central finite
 * differences in f64 in `gradients.test.ts`.
 */

/**
 * Softmax's gradient dx = y (dy - sum(dy y)) over the last axis from its output y: the backend's
 * one kernel where it has it, else these ops, with the same bits ([Note: softmax's gradient in one
 * pass]).
 */
export function softmaxGrad(y: Tensor, dy: Tensor): Tensor {
  return softmaxGradByKernel(y, dy) ?? mul(y, sub(dy, sum(mul(dy, y), -1, { keepDim: true })));
}

/**
 * `scaledMaskedSoftmax`'s gradient dx = where(mask, 0, softmax's gradient) * scale from its output
 * y: the backend's one kernel where it has it, else the ops ([Note: attention's softmax in one call]).
 */
function scaledMaskedSoftmaxGrad(y: Tensor, dy: Tensor, mask: Tensor, scale: number): Tensor {
  return (
    scaledMaskedSoftmaxGradByKernel(y, dy, mask, scale) ??
    mul(where(mask, 0, softmaxGrad(y, dy)), scale)
  );
}

function shapeOf(ctx: GradContext, i: number): readonly number[] {
  return ctx.inputs[i]!.shape;
}

/** A binary op's operand i: its saved tensor, or its number from attrs. */
function operand(ctx: GradContext, i: 0 | 1): Tensor | number {
  return ctx.inputs[i] ? ctx.savedInput(i) : (ctx.attrs[i === 0 ? 'a' : 'b'] as number);
}

/** Gradient of each tensor operand of a binary op, reduced to its shape. */
function binary(
  ctx: GradContext,
  da: () => Tensor,
  db: () => Tensor,
): [Tensor | null, Tensor | null] {
  return [
    ctx.needsInputGrad[0] ? reduceTo(da(), shapeOf(ctx, 0)) : null,
    ctx.needsInputGrad[1] ? reduceTo(db(), shapeOf(ctx, 1)) : null,
  ];
}

/** g where the mask holds, half of g where `tie` holds (PyTorch splits ties evenly). */
function extremumGrad(g: Tensor, wins: Tensor, ties: Tensor): Tensor {
  return mul(g, add(wins, mul(ties, 0.5)));
}

/** max / min over axes: g goes to the elements equal to the result, split evenly on ties. */
const extremumOverAxes: GradientDef = {
  saveInputs: [0],
  saveOutputs: [0],
  backward(ctx, [g]) {
    const x = ctx.savedInput(0);
    const out = ctx.savedOutput(0);
    const inputShape = ctx.attrs.inputShape as number[];
    const axes = ctx.attrs.axes as number[];
    const keptShape = inputShape.map((d, i) => (axes.includes(i) ? 1 : d));
    const outKept = expand(reshape(out, keptShape), inputShape);
    const mask = cast(eq(x, outKept), x.dtype);
    const count = expand(sum(mask, axes, { keepDim: true }), inputShape);
    const gKept = expand(reshape(g!, keptShape), inputShape);
    return [div(mul(gKept, mask), count)];
  },
};

function pairwiseExtremum(kind: 'maximum' | 'minimum'): GradientDef {
  return {
    saveInputs: [0, 1],
    backward(ctx, [g]) {
      const a = operand(ctx, 0);
      const b = operand(ctx, 1);
      const dtype = ctx.inputs[0]?.dtype ?? ctx.inputs[1]!.dtype;
      // Comparisons need a tensor on one side; broadcasting gives every mask out's shape.
      const better = (x: Tensor | number, y: Tensor | number): Tensor => {
        const m = kind === 'maximum' ? gtAny(x, y) : gtAny(y, x);
        return cast(m, dtype);
      };
      const ties = cast(eqAny(a, b), dtype);
      return binary(
        ctx,
        () => extremumGrad(g!, better(a, b), ties),
        () => extremumGrad(g!, better(b, a), ties),
      );
    },
  };
}

function gtAny(x: Tensor | number, y: Tensor | number): Tensor {
  return typeof x === 'number' ? lt(y as Tensor, x) : gt(x, y);
}

function eqAny(x: Tensor | number, y: Tensor | number): Tensor {
  return typeof x === 'number' ? eq(y as Tensor, x) : eq(x, y);
}

/** The gradient of every differentiable primitive, by its name in `recordOp`. */
export const gradients: Readonly<Record<string, GradientDef>> = {
  neg: { backward: (_ctx, [g]) => [neg(g!)] },
  abs: {
    saveInputs: [0],
    backward(ctx, [g]) {
      const x = ctx.savedInput(0);
      const sign = sub(cast(gt(x, 0), x.dtype), cast(lt(x, 0), x.dtype));
      return [mul(g!, sign)];
    },
  },
  exp: { saveOutputs: [0], backward: (ctx, [g]) => [mul(g!, ctx.savedOutput(0))] },
  log: { saveInputs: [0], backward: (ctx, [g]) => [div(g!, ctx.savedInput(0))] },
  sqrt: {
    saveOutputs: [0],
    backward: (ctx, [g]) => [div(g!, mul(ctx.savedOutput(0), 2))],
  },
  rsqrt: {
    // d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
    saveOutputs: [0],
    backward(ctx, [g]) {
      const y = ctx.savedOutput(0);
      return [mul(mul(g!, -0.5), mul(y, mul(y, y)))];
    },
  },
  tanh: {
    saveOutputs: [0],
    backward(ctx, [g]) {
      const y = ctx.savedOutput(0);
      return [mul(g!, sub(1, mul(y, y)))];
    },
  },
  sigmoid: {
    saveOutputs: [0],
    backward(ctx, [g]) {
      const y = ctx.savedOutput(0);
      return [mul(g!, mul(y, sub(1, y)))];
    },
  },
  relu: {
    saveInputs: [0],
    backward: (ctx, [g]) => [activationGrad('relu', ctx.savedInput(0), g!)],
  },
  square: {
    saveInputs: [0],
    backward: (ctx, [g]) => [mul(g!, mul(ctx.savedInput(0), 2))],
  },
  reciprocal: {
    saveOutputs: [0],
    backward(ctx, [g]) {
      const y = ctx.savedOutput(0);
      return [neg(mul(g!, mul(y, y)))];
    },
  },
  gelu: {
    saveInputs: [0],
    backward(ctx, [g]) {
      const kind = ctx.attrs.approximate === 'tanh' ? 'geluTanh' : 'gelu';
      return [activationGrad(kind, ctx.savedInput(0), g!)];
    },
  },
  add: {
    backward: (ctx, [g]) =>
      binary(
        ctx,
        () => g!,
        () => g!,
      ),
  },
  mul: {
    saveInputs: [0, 1],
    backward: (ctx, [g]) =>
      binary(
        ctx,
        () => mul(g!, operand(ctx, 1)),
        () => mul(g!, operand(ctx, 0)),
      ),
  },
  div: {
    // d(a/b)/da = 1/b; d(a/b)/db = -a/b^2
    saveInputs: [0, 1],
    backward(ctx, [g]) {
      const a = operand(ctx, 0);
      const b = operand(ctx, 1);
      return binary(
        ctx,
        () => div(g!, b),
        () => neg(div(mul(g!, a), typeof b === 'number' ? b * b : mul(b, b))),
      );
    },
  },
  pow: {
    // d(a^b)/da = b a^(b-1); d(a^b)/db = a^b log a (0 where a == 0, as PyTorch for b >= 0)
    saveInputs: [0, 1],
    saveOutputs: [0],
    backward(ctx, [g]) {
      const a = operand(ctx, 0);
      const b = operand(ctx, 1);
      return binary(
        ctx,
        () => {
          const bMinus1 = typeof b === 'number' ? b - 1 : sub(b, 1);
          const base = a as Tensor;
          return mul(mul(g!, b), pow(base, bMinus1));
        },
        () => {
          const out = ctx.savedOutput(0);
          const logA = typeof a === 'number' ? Math.log(a) : log(a);
          const d = mul(mul(g!, out), logA);
          return typeof a === 'number' ? d : where(eq(a, 0), 0, d);
        },
      );
    },
  },
  maximum: pairwiseExtremum('maximum'),
  minimum: pairwiseExtremum('minimum'),
  where: {
    saveInputs: [0],
    backward(ctx, [g]) {
      const cond = ctx.savedInput(0);
      const a = ctx.needsInputGrad[1] ? reduceTo(where(cond, g!, 0), shapeOf(ctx, 1)) : null;
      const b = ctx.needsInputGrad[2] ? reduceTo(where(cond, 0, g!), shapeOf(ctx, 2)) : null;
      return [null, a, b];
    },
  },
  sum: {
    backward(ctx, [g]) {
      const inputShape = ctx.attrs.inputShape as number[];
      const axes = ctx.attrs.axes as number[];
      const keptShape = inputShape.map((d, i) => (axes.includes(i) ? 1 : d));
      return [expand(reshape(g!, keptShape), inputShape)];
    },
  },
  max: extremumOverAxes,
  min: extremumOverAxes,
  softmax: {
    // dx = y * (g - sum(g * y)), in one kernel where the backend has it.
    saveOutputs: [0],
    backward: (ctx, [g]) => [softmaxGrad(ctx.savedOutput(0), g!)],
  },
  scaledMaskedSoftmax: {
    // dx = where(mask, 0, y * (g - sum(g * y))) * scale ([Note: attention's softmax in one call]).
    saveInputs: [1],
    saveOutputs: [0],
    backward(ctx, [g]) {
      const scale = ctx.attrs.scale as number;
      return [scaledMaskedSoftmaxGrad(ctx.savedOutput(0), g!, ctx.savedInput(1), scale), null];
    },
  },
  logSoftmax: {
    // dx = g - exp(y) * sum(g)
    saveOutputs: [0],
    backward(ctx, [g]) {
      const y = ctx.savedOutput(0);
      return [sub(g!, mul(exp(y), sum(g!, -1, { keepDim: true })))];
    },
  },
  layerNorm: {
    saveInputs: [0, 1],
    saveAttrs: ['mean', 'rstd'],
    backward(ctx, [g]) {
      const x = ctx.savedInput(0);
      const weight = ctx.inputs[1] ? ctx.savedInput(1) : null;
      const mean = ctx.savedAttr('mean');
      const rstd = ctx.savedAttr('rstd');
      const cols = x.shape[x.rank - 1]!;
      const rows = cols === 0 ? 0 : x.size / cols;
      const statsDType = mean.dtype;
      const backend = x.backend;
      const dx = Tensor.empty(backend, x.shape, x.dtype);
      const dWeight = ctx.needsInputGrad[1] ? Tensor.empty(backend, [cols], statsDType) : null;
      const dBias = ctx.needsInputGrad[2] ? Tensor.empty(backend, [cols], statsDType) : null;
      const as2d = (t: Tensor) => ({ ...t.kernel('layerNorm backward'), shape: [rows, cols] });
      backend.layerNormBackward(
        as2d(g!),
        as2d(x),
        weight?.kernel('layerNorm backward') ?? null,
        mean.kernel('layerNorm backward'),
        rstd.kernel('layerNorm backward'),
        as2d(dx),
        dWeight?.kernel('layerNorm backward') ?? null,
        dBias?.kernel('layerNorm backward') ?? null,
      );
      const asParam = (t: Tensor | null, i: number): Tensor | null =>
        t === null ? null : t.dtype === ctx.inputs[i]!.dtype ? t : cast(t, ctx.inputs[i]!.dtype);
      return [ctx.needsInputGrad[0] ? dx : null, asParam(dWeight, 1), asParam(dBias, 2)];
    },
  },
  matmul: {
    // out = A' B' with A' = transposeA ? A^T : A, B' = transposeB ? B^T : B (per batch).
    saveInputs: [0, 1],
    backward(ctx, [g]) {
      const tA = ctx.attrs.transposeA === true;
      const tB = ctx.attrs.transposeB === true;
      const a = ctx.needsInputGrad[1] ? ctx.savedInput(0) : null;
      const b = ctx.needsInputGrad[0] ? ctx.savedInput(1) : null;
      const da =
        b === null
          ? null
          : tA
            ? batchedMatmul(b, g!, { transposeA: tB, transposeB: true })
            : batchedMatmul(g!, b, { transposeB: !tB });
      const db =
        a === null
          ? null
          : foldsWeightGrad(a, shapeOf(ctx, 1), tA)
            ? foldedWeightGrad(a, g!, tB)
            : tB
              ? batchedMatmul(g!, a, { transposeA: true, transposeB: tA })
              : batchedMatmul(a, g!, { transposeA: !tA });
      return [da && reduceTo(da, shapeOf(ctx, 0)), db && reduceTo(db, shapeOf(ctx, 1))];
    },
  },
  linear: linearGradient(),
  attention: attentionGradient(scaledMaskedSoftmaxGrad),
  matmulViews: matmulViewsGradient(),
  embedding: {
    // dWeight = scatterAdd(dy rows, ids, V)
    saveInputs: [1],
    backward(ctx, [g]) {
      const indices = ctx.savedInput(1);
      const weightShape = shapeOf(ctx, 0);
      const dim = shapeSize(weightShape.slice(1));
      const rows = reshape(g!, [indices.size, dim]);
      const flat = reshape(indices, [indices.size]);
      return [reshape(scatterAdd(rows, flat, weightShape[0]!), weightShape), null];
    },
  },
  indexAdd: {
    saveInputs: [1],
    backward(ctx, [g]) {
      const indices = ctx.savedInput(1);
      return [
        ctx.needsInputGrad[0] ? g! : null,
        null,
        ctx.needsInputGrad[2] ? embedding(g!, indices) : null,
      ];
    },
  },
  crossEntropy: {
    saveInputs: [0, 1],
    backward(ctx, [g]) {
      const logits = ctx.savedInput(0);
      const targets = ctx.savedInput(1);
      const dLogits = Tensor.empty(logits.backend, logits.shape, logits.dtype);
      logits.backend.crossEntropyBackward(
        logits.kernel('crossEntropy backward'),
        targets.kernel('crossEntropy backward'),
        g!.kernel('crossEntropy backward'),
        dLogits.kernel('crossEntropy backward'),
        ctx.attrs.ignoreIndex as number,
      );
      return [dLogits, null];
    },
  },
  ...layoutGradients(),
};
