// CPU kernels of the elementwise family: fill, copy, cast, unary and binary maps with
// broadcasting, where, axpy.
import { saturateToI32 } from '../../dtype-convert.js';
import type { BinaryOp, KernelTensor, UnaryOp } from '../backend.js';
import { inoutValues, outputValues, rawView, readValues, type Values } from './cpu-storage.js';
import { broadcastStrides, forEachRow, sameShape } from './kernel-common.js';
import { gelu, geluDerivative, geluTanh, geluTanhDerivative, sigmoid } from './math.js';

type Scalar2 = (x: number, y: number) => number;

const unaryFunctions: Record<UnaryOp, (x: number) => number> = {
  neg: (x) => -x,
  abs: Math.abs,
  exp: Math.exp,
  log: Math.log,
  sqrt: Math.sqrt,
  rsqrt: (x) => 1 / Math.sqrt(x),
  tanh: Math.tanh,
  sigmoid,
  relu: (x) => (x > 0 ? x : x === 0 || x < 0 ? 0 : x),
  gelu,
  geluTanh,
  square: (x) => x * x,
  reciprocal: (x) => 1 / x,
};

const binaryFunctions: Record<BinaryOp, Scalar2> = {
  add: (x, y) => x + y,
  sub: (x, y) => x - y,
  mul: (x, y) => x * y,
  div: (x, y) => x / y,
  pow: Math.pow,
  maximum: (x, y) => (Number.isNaN(x) || Number.isNaN(y) ? Number.NaN : Math.max(x, y)),
  minimum: (x, y) => (Number.isNaN(x) || Number.isNaN(y) ? Number.NaN : Math.min(x, y)),
  eq: (x, y) => (x === y ? 1 : 0),
  ne: (x, y) => (x !== y ? 1 : 0),
  lt: (x, y) => (x < y ? 1 : 0),
  le: (x, y) => (x <= y ? 1 : 0),
  gt: (x, y) => (x > y ? 1 : 0),
  ge: (x, y) => (x >= y ? 1 : 0),
  reluGrad: (x, dy) => (x > 0 ? dy : 0),
  geluGrad: (x, dy) => dy * geluDerivative(x),
  geluTanhGrad: (x, dy) => dy * geluTanhDerivative(x),
};

type Operand = { values: Values; strides: number[] } | number;

export function fillKernel(out: KernelTensor, value: number): void {
  const o = outputValues(out);
  o.values.fill(value);
  o.commit();
}

export function copyKernel(src: KernelTensor, out: KernelTensor): void {
  rawView(out).set(rawView(src) as never);
}

export function castKernel(src: KernelTensor, out: KernelTensor): void {
  if (src.dtype === out.dtype) {
    copyKernel(src, out);
    return;
  }
  const x = readValues(src);
  const o = outputValues(out);
  const v = o.values;
  if (out.dtype === 'i32') {
    // See [Note: cast semantics]: truncate, saturate, NaN -> 0.
    for (let i = 0; i < x.length; i++) v[i] = saturateToI32(x[i]!);
  } else if (out.dtype === 'f16' || out.dtype === 'bf16') {
    // Through f32 first: the contract computes in f32 and rounds f32 to the 16-bit format.
    for (let i = 0; i < x.length; i++) v[i] = Math.fround(x[i]!);
  } else {
    v.set(x);
  }
  o.commit();
}

export function unaryKernel(op: UnaryOp, x: KernelTensor, out: KernelTensor): void {
  const f = unaryFunctions[op];
  const xv = readValues(x);
  const o = outputValues(out);
  const v = o.values;
  for (let i = 0; i < xv.length; i++) v[i] = f(xv[i]!);
  o.commit();
}

export function binaryKernel(
  op: BinaryOp,
  a: KernelTensor | number,
  b: KernelTensor | number,
  out: KernelTensor,
): void {
  const f =
    out.dtype === 'i32' && op === 'mul'
      ? (x: number, y: number) => Math.imul(x, y)
      : binaryFunctions[op];
  broadcastMap([a, b], out, (values) => f(values[0]!, values[1]!));
}

export function whereKernel(
  cond: KernelTensor,
  a: KernelTensor | number,
  b: KernelTensor | number,
  out: KernelTensor,
): void {
  broadcastMap([cond, a, b], out, (values) => (values[0] !== 0 ? values[1]! : values[2]!));
}

/** out = f(operands...) with NumPy broadcasting; operands are tensors or scalars. */
function broadcastMap(
  inputs: (KernelTensor | number)[],
  out: KernelTensor,
  f: (values: number[]) => number,
): void {
  const o = outputValues(out);
  const v = o.values;
  const operands: Operand[] = inputs.map((t) =>
    typeof t === 'number'
      ? t
      : { values: readValues(t), strides: broadcastStrides(t.shape, out.shape) },
  );
  const args = new Array<number>(inputs.length).fill(0);
  const flat = inputs.every((t) => typeof t === 'number' || sameShape(t.shape, out.shape));
  for (let s = 0; s < operands.length; s++) {
    const operand = operands[s]!;
    if (typeof operand === 'number') args[s] = operand;
  }
  if (flat) {
    const arrays = operands.map((operand) => (typeof operand === 'number' ? null : operand.values));
    if (arrays.length === 2) {
      const [x, y] = arrays;
      const ax = args;
      for (let i = 0; i < v.length; i++) {
        if (x) ax[0] = x[i]!;
        if (y) ax[1] = y[i]!;
        v[i] = f(ax);
      }
    } else {
      for (let i = 0; i < v.length; i++) {
        for (let s = 0; s < arrays.length; s++) {
          const arr = arrays[s];
          if (arr) args[s] = arr[i]!;
        }
        v[i] = f(args);
      }
    }
    o.commit();
    return;
  }
  const rank = out.shape.length;
  const cols = rank === 0 ? 1 : out.shape[rank - 1]!;
  const tensorOperands = operands.filter((op) => typeof op !== 'number') as {
    values: Values;
    strides: number[];
  }[];
  const slots = operands.flatMap((op, s) => (typeof op === 'number' ? [] : [s]));
  const lastStrides = tensorOperands.map((op) => (rank === 0 ? 0 : op.strides[rank - 1]!));
  forEachRow(
    out.shape,
    tensorOperands.map((op) => op.strides),
    (row, bases) => {
      const outBase = row * cols;
      for (let c = 0; c < cols; c++) {
        for (let t = 0; t < tensorOperands.length; t++) {
          args[slots[t]!] = tensorOperands[t]!.values[bases[t]! + c * lastStrides[t]!]!;
        }
        v[outBase + c] = f(args);
      }
    },
  );
  o.commit();
}

export function axpyKernel(alpha: number, x: KernelTensor, y: KernelTensor): void {
  const xv = readValues(x);
  const o = inoutValues(y);
  const v = o.values;
  for (let i = 0; i < v.length; i++) v[i] = v[i]! + alpha * xv[i]!;
  o.commit();
}
