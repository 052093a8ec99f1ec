import type { DType } from '../dtype.js';
import { cast, narrow, permute, reshape, sum } from '../ops/index.js';
import { contiguousStrides } from '../ops/validate.js';
import { Tensor } from '../tensor.js';
import type { GradientDef } from './node.js';

/**
 * The gradients of the primitives that move, view or retype elements without arithmetic (reshape,
 * permute, slice, concat, expand, cast: their rows in [Note: the recorded primitives]), entries of
 * the gradient table ([Note: the gradient table] in gradients.ts), and `reduceTo`, a broadcast's
 * gradient summed back to its operand's shape, which the arithmetic's gradients use too.
 */

/** Sum `grad` over the dims that broadcasting added or expanded, back to `shape`. */
export function reduceTo(grad: Tensor, shape: readonly number[]): Tensor {
  const lead = grad.rank - shape.length;
  const axes: number[] = [];
  grad.shape.forEach((d, i) => {
    if (i < lead || (shape[i - lead] === 1 && d !== 1)) axes.push(i);
  });
  if (axes.length === 0) return grad;
  return reshape(sum(grad, axes, { keepDim: true }), shape);
}

function zerosOf(like: Tensor, shape: readonly number[], dtype: DType = like.dtype): Tensor {
  const t = Tensor.empty(like.backend, shape, dtype);
  like.backend.fill(t.kernel('backward'), 0);
  return t;
}

/**
 * The layout primitives' entries of the gradient table, made when the table is. A function, not a
 * constant: this file and gradients.ts are in the ops' import cycle, and a bundle (tsup's dist) may
 * evaluate this file after the table, when a constant here would still be undefined (the table
 * spread nothing: "no gradient is defined for op 'reshape'" from dist, in the Slurm test's ranks);
 * a function declaration is hoisted.
 */
export function layoutGradients(): Record<string, GradientDef> {
  return {
    reshape: { backward: (ctx, [g]) => [reshape(g!, ctx.attrs.shape as number[])] },
    permute: {
      backward(ctx, [g]) {
        const dims = ctx.attrs.dims as number[];
        const inverse = new Array<number>(dims.length);
        dims.forEach((d, i) => {
          inverse[d] = i;
        });
        return [permute(g!, inverse)];
      },
    },
    slice: {
      // Zeros of the input's shape with g copied into the strided window the slice read.
      backward(ctx, [g]) {
        const inputShape = ctx.attrs.inputShape as number[];
        const starts = ctx.attrs.starts as number[];
        const steps = ctx.attrs.steps as number[];
        const dx = zerosOf(g!, inputShape);
        if (g!.size > 0) {
          const strides = contiguousStrides(inputShape);
          const gk = g!.kernel('slice backward');
          const dk = dx.kernel('slice backward');
          dx.backend.copyStrided(
            {
              storage: gk.storage,
              offset: gk.offset,
              dtype: gk.dtype,
              strides: contiguousStrides(g!.shape),
            },
            {
              storage: dk.storage,
              offset: dk.offset + starts.reduce((p, s, i) => p + s * strides[i]!, 0),
              dtype: dk.dtype,
              strides: strides.map((s, i) => s * steps[i]!),
            },
            g!.shape,
          );
        }
        return [dx];
      },
    },
    concat: {
      backward(ctx, [g]) {
        const axis = ctx.attrs.axis as number;
        const sizes = ctx.attrs.sizes as number[];
        let start = 0;
        return sizes.map((size, i) => {
          const piece = ctx.needsInputGrad[i] ? narrow(g!, axis, start, size) : null;
          start += size;
          return piece;
        });
      },
    },
    expand: {
      backward: (ctx, [g]) => [reduceTo(g!, ctx.attrs.inputShape as number[])],
    },
    cast: {
      backward(ctx, [g]) {
        const from = ctx.attrs.from as DType;
        return [from === 'i32' ? null : cast(g!, from)];
      },
    },
  };
}
