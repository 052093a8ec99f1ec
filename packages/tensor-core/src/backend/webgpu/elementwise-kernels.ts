import type { BinaryOp, UnaryOp } from '../backend.js';
import {
  broadcastStrides,
  castBody,
  coalesce,
  type Dense,
  ewLaunch,
  header,
  stridedIndexFn,
} from './kernel-common.js';
import { type QuadOperand, type QuadRead, quadBody, quadsFit } from './elementwise-quads.js';
import { elementwiseProgram, input, type Launch } from './program.js';
import { valueType } from './wgsl.js';

export function fillLaunch(out: Dense, value: number): Launch {
  const isInt = out.dtype === 'i32';
  const body = isInt
    ? 'fn outv(i: u32) -> i32 { return pi(2u); }'
    : 'fn outv(i: u32) -> f32 { return pf(2u); }';
  // Four elements a load where they fit ([Note: element-wise kernels four elements a load]).
  const quad = quadsFit(out, [], 0)
    ? quadBody([{ name: 'v', dtype: out.dtype, at: 2, read: null }], out.dtype, 'v')
    : undefined;
  const program = elementwiseProgram({
    name: 'fill',
    key: '',
    inputs: [],
    out: out.dtype,
    body,
    quad,
  });
  const params = header(out);
  if (isInt) params.i(Math.trunc(value));
  else params.f(value);
  return ewLaunch(program, [out.dtype], [], out, params);
}

/** out = src (same dtype) or src converted (cast). Raw bits when the dtypes agree. */
export function copyLaunch(src: Dense, out: Dense): Launch {
  const same = src.dtype === out.dtype;
  const body = same
    ? 'fn outv(i: u32) -> u32 { return raw_x(prm[2] + i); }'
    : castBody(src.dtype, out.dtype);
  const program = elementwiseProgram({
    name: same ? 'copy' : 'cast',
    key: '',
    inputs: [{ name: 'x', dtype: src.dtype }],
    out: out.dtype,
    raw: same,
    body,
  });
  return ewLaunch(
    program,
    [src.dtype, out.dtype],
    [input(src, src.size)],
    out,
    header(out).u(src.offset),
  );
}

const UNARY: Record<UnaryOp, string> = {
  neg: '-x',
  abs: 'abs(x)',
  exp: 'exp(x)',
  log: 'log(x)',
  sqrt: 'sqrt(x)',
  rsqrt: 'inverseSqrt(x)',
  tanh: 'tanh_safe(x)',
  sigmoid: '1.0 / (1.0 + exp(-x))',
  relu: 'select(0.0, x, x > 0.0)',
  gelu: 'gelu(x)',
  geluTanh: 'gelu_tanh(x)',
  square: 'x * x',
  reciprocal: '1.0 / x',
};

export function unaryLaunch(op: UnaryOp, x: Dense, out: Dense): Launch {
  const t = valueType(out.dtype);
  const expr = t === 'i32' && op === 'abs' ? 'abs(x)' : UNARY[op];
  const body = `fn outv(i: u32) -> ${t} { let x = ld_x(prm[2] + i); return ${expr}; }`;
  // Four elements a load where they fit ([Note: element-wise kernels four elements a load]).
  const quad = quadsFit(out, [{ ...x, read: 'c' }], 0)
    ? quadBody([{ name: 'x', dtype: x.dtype, at: 2, read: 'c' }], out.dtype, expr)
    : undefined;
  const program = elementwiseProgram({
    name: `unary_${op}`,
    key: op,
    inputs: [{ name: 'x', dtype: x.dtype }],
    out: out.dtype,
    body,
    quad,
  });
  return ewLaunch(program, [x.dtype, out.dtype], [input(x, x.size)], out, header(out).u(x.offset));
}

function binaryExpr(op: BinaryOp, t: 'f32' | 'i32'): string {
  const one = t === 'f32' ? '1.0' : '1';
  const zero = t === 'f32' ? '0.0' : '0';
  const cmp = (c: string) => `select(${zero}, ${one}, ${c})`;
  switch (op) {
    case 'add':
      return 'a + b';
    case 'sub':
      return 'a - b';
    case 'mul':
      return 'a * b';
    case 'div':
      return 'a / b';
    case 'pow':
      return 'pow_real(a, b)';
    case 'maximum':
      return 'max(a, b)';
    case 'minimum':
      return 'min(a, b)';
    case 'eq':
      return cmp('a == b');
    case 'ne':
      return cmp('a != b');
    case 'lt':
      return cmp('a < b');
    case 'le':
      return cmp('a <= b');
    case 'gt':
      return cmp('a > b');
    case 'ge':
      return cmp('a >= b');
    case 'reluGrad':
      return 'select(0.0, b, a > 0.0)';
    case 'geluGrad':
      return 'b * gelu_grad(a)';
    case 'geluTanhGrad':
      return 'b * gelu_tanh_grad(a)';
  }
}

/** A broadcast operand: a tensor with its shape, or a scalar. */
export type BroadcastOperand = (Dense & { shape: readonly number[] }) | number;

/**
 * [Note: one division for a broadcast of two dims]
 * After `coalesce`, most broadcasts are two dims of which the operand walks one: a bias over every
 * row ([rows, n], strides [0, 1]: element i reads i % n) or a value per row ([rows, n], strides
 * [1, 0]: i / n). The general strided index loops over the dims with a division and a modulo
 * each, from params; on the CPU adapters that made a bias add about 2x a contiguous add (issue
 * 49). These two index with one operation; the loads, and so the bits, are the same.
 */
function broadcastSplit(strides: readonly number[]): 'row' | 'col' | null {
  if (strides[0] === 0 && strides[1] === 1) return 'row';
  if (strides[0] === 1 && strides[1] === 0) return 'col';
  return null;
}

/**
 * Element-wise over `out.shape` with broadcast operands. Params: [outOff, size, then per operand
 * (offset, scalar bits)], then dims, then each tensor operand's strides.
 */
function broadcastLaunch(
  name: string,
  key: string,
  operands: { name: string; value: BroadcastOperand }[],
  out: Dense & { shape: readonly number[] },
  expr: string,
): Launch {
  const t = valueType(out.dtype);
  const tensors = operands.filter(
    (o): o is { name: string; value: Dense & { shape: readonly number[] } } =>
      typeof o.value !== 'number',
  );
  const strides = tensors.map((o) => broadcastStrides(o.value.shape, out.shape));
  const merged = coalesce(out.shape, strides);
  const rank = merged.shape.length;
  const params = header(out);
  const scalarAt = new Map<string, number>();
  const offsetAt = new Map<string, number>();
  for (const o of operands) {
    if (typeof o.value === 'number') {
      scalarAt.set(o.name, params.length);
      if (t === 'i32') params.i(o.value);
      else params.f(o.value);
    } else {
      offsetAt.set(o.name, params.length);
      params.u(o.value.offset);
    }
  }
  const dimsAt = params.length;
  for (const d of merged.shape) params.u(d);
  const fns: string[] = [];
  const modes: (QuadRead | 's')[] = [];
  const dense = broadcastStrides(merged.shape, merged.shape);
  tensors.forEach((o, k) => {
    const s = merged.strides[k]!;
    const contiguous = s.every((v, d) => v === dense[d]);
    const split = rank === 2 ? broadcastSplit(s) : null;
    if (contiguous) {
      modes.push('c');
      fns.push(`fn idx_${o.name}(i: u32) -> u32 { return i; }`);
    } else if (split !== null) {
      // [Note: one division for a broadcast of two dims]
      modes.push(split);
      const n = `prm[${dimsAt + 1}u]`;
      fns.push(`fn idx_${o.name}(i: u32) -> u32 { return i ${split === 'row' ? '%' : '/'} ${n}; }`);
    } else {
      modes.push('s');
      const at = params.length;
      for (const v of s) params.u(v);
      fns.push(stridedIndexFn(`idx_${o.name}`, rank, dimsAt, at));
    }
  });
  const lets = operands
    .map((o) =>
      typeof o.value === 'number'
        ? `let ${o.name} = ${t === 'i32' ? 'pi' : 'pf'}(${scalarAt.get(o.name)}u);`
        : `let ${o.name} = ld_${o.name}(prm[${offsetAt.get(o.name)}u] + idx_${o.name}(i));`,
    )
    .join('\n  ');
  const body = `${fns.join('\n')}
fn outv(i: u32) -> ${t} {
  ${lets}
  return ${expr};
}`;
  const inputs = tensors.map((o) => ({ name: o.name, dtype: o.value.dtype }));
  // Four elements a load where they fit ([Note: element-wise kernels four elements a load]).
  const reads = tensors.map((o, k) => ({ ...o.value, read: modes[k]! }));
  const n = rank === 2 ? merged.shape[1]! : 0;
  let quad: string | undefined;
  if (quadsFit(out, reads, n)) {
    const readOf = new Map(tensors.map((o, k) => [o.name, modes[k] as QuadRead]));
    const quadOperands = operands.map((o): QuadOperand => {
      if (typeof o.value === 'number') {
        return { name: o.name, dtype: out.dtype, at: scalarAt.get(o.name)!, read: null };
      }
      const read = readOf.get(o.name)!;
      return { name: o.name, dtype: o.value.dtype, at: offsetAt.get(o.name)!, read };
    });
    quad = quadBody(quadOperands, out.dtype, expr, dimsAt + 1);
  }
  const program = elementwiseProgram({
    name,
    key: `${key}:r${rank}:${operands.map((o) => (typeof o.value === 'number' ? 'n' : 't')).join('')}:${modes.join('')}`,
    inputs,
    out: out.dtype,
    body,
    quad,
  });
  return ewLaunch(
    program,
    [...inputs.map((x) => x.dtype), out.dtype],
    tensors.map((o) => input(o.value, o.value.size)),
    out,
    params,
  );
}

export function binaryLaunch(
  op: BinaryOp,
  a: BroadcastOperand,
  b: BroadcastOperand,
  out: Dense & { shape: readonly number[] },
): Launch {
  const expr = binaryExpr(op, valueType(out.dtype));
  return broadcastLaunch(
    `binary_${op}`,
    op,
    [
      { name: 'a', value: a },
      { name: 'b', value: b },
    ],
    out,
    expr,
  );
}

export function whereLaunch(
  cond: Dense & { shape: readonly number[] },
  a: BroadcastOperand,
  b: BroadcastOperand,
  out: Dense & { shape: readonly number[] },
): Launch {
  const zero = cond.dtype === 'i32' ? '0' : '0.0';
  return broadcastLaunch(
    'where',
    'where',
    [
      { name: 'c', value: cond },
      { name: 'a', value: a },
      { name: 'b', value: b },
    ],
    out,
    `select(b, a, c != ${zero})`,
  );
}

export function axpyLaunch(alpha: number, x: Dense, y: Dense): Launch {
  const body = 'fn outv(i: u32) -> f32 { return ld_out(prm[0] + i) + pf(3u) * ld_x(prm[2] + i); }';
  const program = elementwiseProgram({
    name: 'axpy',
    key: '',
    inputs: [{ name: 'x', dtype: x.dtype }],
    out: y.dtype,
    body,
  });
  return ewLaunch(
    program,
    [x.dtype, y.dtype],
    [input(x, x.size)],
    y,
    header(y).u(x.offset).f(alpha),
  );
}

// ---- strided copy -----------------------------------------------------------------------------
