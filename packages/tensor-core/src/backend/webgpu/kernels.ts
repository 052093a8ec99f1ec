import type { DType } from '../../dtype.js';
import type { BinaryOp, ReduceOp, UnaryOp } from '../backend.js';
import {
  elementwiseProgram,
  type Launch,
  type LaunchBinding,
  type Operand,
  Params,
  type Program,
  input,
  linearDispatch,
  output,
} from './program.js';
import {
  CONVERT,
  declare,
  errorDecl,
  is16,
  linearIndex,
  loader,
  MATH,
  paramsDecl,
  rawLoader,
  storeAccess,
  storer,
  valueType,
} from './wgsl.js';

/** A contiguous operand with its element count. */
export interface Dense extends Operand {
  readonly size: number;
}

function ewLaunch(
  program: Program,
  dtypes: DType[],
  ins: LaunchBinding[],
  out: Dense,
  params: Params,
  usesError = false,
): Launch {
  return {
    program,
    dtypes,
    bindings: [...ins, output(out, out.size)],
    params: params.toArray(),
    shape: [out.size],
    usesError,
  };
}

function header(out: Dense): Params {
  return new Params().u(out.offset).u(out.size);
}

export function fillLaunch(out: Dense, value: number): Launch {
  const isInt = out.dtype === 'i32';
  const body = isInt
    ? 'fn outv(i: u32) -> i32 { return pi(2u); }'
    : 'fn outv(i: u32) -> f32 { return pf(2u); }';
  const program = elementwiseProgram({ name: 'fill', key: '', inputs: [], out: out.dtype, body });
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

/** See [Note: cast semantics] (dtype-convert.ts). */
function castBody(from: DType, to: DType): string {
  if (to === 'i32') return 'fn outv(i: u32) -> i32 { return f32_to_i32(ld_x(prm[2] + i)); }';
  if (from === 'i32') return 'fn outv(i: u32) -> f32 { return i32_to_f32(ld_x(prm[2] + i)); }';
  return 'fn outv(i: u32) -> f32 { return ld_x(prm[2] + i); }';
}

// ---- shapes ---------------------------------------------------------------------------------

/** Merges adjacent dims that every operand walks contiguously; drops size-1 dims. */
export function coalesce(
  shape: readonly number[],
  strides: readonly (readonly number[])[],
): { shape: number[]; strides: number[][] } {
  const outShape: number[] = [];
  const outStrides: number[][] = strides.map(() => []);
  for (let d = 0; d < shape.length; d++) {
    const dim = shape[d]!;
    if (dim === 1) continue;
    const last = outShape.length - 1;
    if (last >= 0 && strides.every((s, k) => outStrides[k]![last] === s[d]! * dim)) {
      outShape[last] = outShape[last]! * dim;
      strides.forEach((s, k) => {
        outStrides[k]![last] = s[d]!;
      });
      continue;
    }
    outShape.push(dim);
    strides.forEach((s, k) => {
      outStrides[k]!.push(s[d]!);
    });
  }
  if (outShape.length === 0) {
    outShape.push(1);
    for (const s of outStrides) s.push(0);
  }
  return { shape: outShape, strides: outStrides };
}

/** Row-major strides of `shape`, with 0 for broadcast (size-1) dims of `operand` right-aligned to it. */
export function broadcastStrides(operand: readonly number[], shape: readonly number[]): number[] {
  const strides = new Array<number>(shape.length).fill(0);
  let stride = 1;
  for (let k = 1; k <= operand.length; k++) {
    const dim = operand[operand.length - k]!;
    strides[shape.length - k] = dim === 1 ? 0 : stride;
    stride *= dim;
  }
  return strides;
}

/** WGSL `fn NAME(i: u32) -> u32` mapping a logical index to a strided offset; dims at prm[dimsAt]. */
function stridedIndexFn(name: string, rank: number, dimsAt: number, stridesAt: number): string {
  return `fn ${name}(i: u32) -> u32 {
  var r = i;
  var o = 0u;
  for (var k = ${rank - 1}; k >= 0; k--) {
    let dim = prm[${dimsAt}u + u32(k)];
    o += (r % dim) * prm[${stridesAt}u + u32(k)];
    r = r / dim;
  }
  return o;
}`;
}

export function shapeSize(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

// ---- unary / binary / where -----------------------------------------------------------------

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
  const program = elementwiseProgram({
    name: `unary_${op}`,
    key: op,
    inputs: [{ name: 'x', dtype: x.dtype }],
    out: out.dtype,
    body,
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
  const modes: string[] = [];
  tensors.forEach((o, k) => {
    const s = merged.strides[k]!;
    const contiguous = s.every((v, d) => v === broadcastStrides(merged.shape, merged.shape)[d]);
    if (contiguous) {
      modes.push('c');
      fns.push(`fn idx_${o.name}(i: u32) -> u32 { return i; }`);
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
  const program = elementwiseProgram({
    name,
    key: `${key}:r${rank}:${operands.map((o) => (typeof o.value === 'number' ? 'n' : 't')).join('')}:${modes.join('')}`,
    inputs,
    out: out.dtype,
    body,
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

export interface Strided extends Operand {
  readonly strides: readonly number[];
}

function extentOf(shape: readonly number[], strides: readonly number[]): number {
  let max = 0;
  shape.forEach((d, k) => {
    max += (d - 1) * strides[k]!;
  });
  return shapeSize(shape) === 0 ? 0 : max + 1;
}

export function copyStridedLaunch(src: Strided, dst: Strided, shape: readonly number[]): Launch {
  const merged = coalesce(shape, [src.strides, dst.strides]);
  const rank = merged.shape.length;
  const size = shapeSize(shape);
  const srcExtent = extentOf(shape, src.strides);
  const dstExtent = extentOf(shape, dst.strides);
  const dstContiguous =
    rank === 1
      ? merged.strides[1]![0] === 1
      : merged.strides[1]!.every((v, d) => v === broadcastStrides(merged.shape, merged.shape)[d]);
  if (dstContiguous) {
    const out: Dense = { storage: dst.storage, offset: dst.offset, dtype: dst.dtype, size };
    const params = header(out).u(src.offset);
    const dimsAt = params.length;
    for (const d of merged.shape) params.u(d);
    const stridesAt = params.length;
    for (const v of merged.strides[0]!) params.u(v);
    const program = elementwiseProgram({
      name: 'copyStrided',
      key: `r${rank}`,
      inputs: [{ name: 'x', dtype: src.dtype }],
      out: dst.dtype,
      raw: true,
      body: `${stridedIndexFn('idx_x', rank, dimsAt, stridesAt)}
fn outv(i: u32) -> u32 { return raw_x(prm[2] + idx_x(i)); }`,
    });
    return ewLaunch(program, [src.dtype, dst.dtype], [input(src, srcExtent)], out, params);
  }
  // A scattered destination: one invocation per element; packed halves through atomics (`rst_`).
  const params = new Params().u(size).u(src.offset).u(dst.offset);
  const dimsAt = params.length;
  for (const d of merged.shape) params.u(d);
  const srcAt = params.length;
  for (const v of merged.strides[0]!) params.u(v);
  const dstAt = params.length;
  for (const v of merged.strides[1]!) params.u(v);
  const program: Program = {
    name: 'copyStridedScatter',
    key: `cs:r${rank}:${dst.dtype}`,
    workgroupSize: [64, 1, 1],
    dispatch: (s) => linearDispatch(s[0] ?? 1, 64),
    wgsl: () => `${CONVERT}
${declare(0, 'x', dst.dtype, 'read')}
${rawLoader('x', dst.dtype)}
${declare(1, 'out', dst.dtype, storeAccess(dst.dtype))}
${storer('out', dst.dtype)}
${paramsDecl(2)}
${stridedIndexFn('idx_x', rank, dimsAt, srcAt)}
${stridedIndexFn('idx_out', rank, dimsAt, dstAt)}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u) {
  let i = ${linearIndex(64)};
  if (i >= prm[0]) { return; }
  let v = raw_x(prm[1] + idx_x(i));
  rst_out(prm[2] + idx_out(i), v);
}`,
  };
  return {
    program,
    dtypes: [src.dtype, dst.dtype],
    bindings: [input(src, srcExtent), output(dst, dstExtent)],
    params: params.toArray(),
    shape: [size],
    usesError: false,
  };
}

// ---- reductions -------------------------------------------------------------------------------

export function reduceLaunch(
  op: ReduceOp,
  x: Dense,
  outer: number,
  length: number,
  inner: number,
  out: Dense,
): Launch {
  const t = valueType(x.dtype);
  const init =
    op === 'sum' || op === 'mean'
      ? `var acc = ${t === 'i32' ? '0' : '0.0'};`
      : 'var acc = ld_x(base);';
  const step =
    op === 'sum' || op === 'mean'
      ? 'acc += v;'
      : op === 'max'
        ? t === 'f32'
          ? 'if (!is_nan(acc)) { acc = select(max(acc, v), v, is_nan(v)); }'
          : 'acc = max(acc, v);'
        : op === 'min'
          ? t === 'f32'
            ? 'if (!is_nan(acc)) { acc = select(min(acc, v), v, is_nan(v)); }'
            : 'acc = min(acc, v);'
          : 'if (v > acc) { acc = v; best = j; }';
  const result =
    op === 'mean'
      ? `${valueType(out.dtype)}(f32(acc) / f32(len))`
      : op === 'argmax'
        ? 'i32(best)'
        : `${valueType(out.dtype)}(acc)`;
  const body = `fn outv(i: u32) -> ${valueType(out.dtype)} {
  let inner = prm[4];
  let len = prm[3];
  let base = prm[2] + (i / inner) * len * inner + (i % inner);
  ${init}
  var best = 0u;
  for (var j = 0u; j < len; j++) {
    let v = ld_x(base + j * inner);
    ${step}
  }
  return ${result};
}`;
  const program = elementwiseProgram({
    name: `reduce_${op}`,
    key: op,
    inputs: [{ name: 'x', dtype: x.dtype }],
    out: out.dtype,
    body,
  });
  void outer;
  return ewLaunch(
    program,
    [x.dtype, out.dtype],
    [input(x, x.size)],
    out,
    header(out).u(x.offset).u(length).u(inner),
  );
}

// ---- row kernels: one invocation per row ------------------------------------------------------

interface RowBinding {
  name: string;
  t: Operand;
  extent: number;
  mode: 'read' | 'store';
}

function rowProgram(
  name: string,
  key: string,
  bindings: RowBinding[],
  body: string,
  usesError = false,
): Program {
  const dtypes = bindings.map((b) => b.t.dtype);
  return {
    name,
    key: `row:${name}:${key}:${dtypes.join(',')}`,
    workgroupSize: [64, 1, 1],
    dispatch: (s) => linearDispatch(s[0] ?? 1, 64),
    wgsl: () => {
      const lines = [CONVERT, MATH];
      bindings.forEach((b, k) => {
        if (b.mode === 'read') {
          lines.push(declare(k, b.name, b.t.dtype, 'read'), loader(b.name, b.t.dtype));
        } else {
          lines.push(
            declare(k, b.name, b.t.dtype, storeAccess(b.t.dtype)),
            storer(b.name, b.t.dtype),
          );
        }
      });
      lines.push(paramsDecl(bindings.length));
      if (usesError) lines.push(errorDecl(bindings.length + 1));
      lines.push(`@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u) {
  let row = ${linearIndex(64)};
  if (row >= prm[0]) { return; }
  ${body}
}`);
      return lines.join('\n');
    },
  };
}

function rowLaunch(
  program: Program,
  bindings: RowBinding[],
  params: Params,
  rows: number,
  usesError = false,
): Launch {
  return {
    program,
    dtypes: bindings.map((b) => b.t.dtype),
    bindings: bindings.map((b) =>
      b.mode === 'read' ? input(b.t, b.extent) : output(b.t, b.extent),
    ),
    params: params.toArray(),
    shape: [rows],
    usesError,
  };
}

export function softmaxLaunch(
  x: Dense,
  out: Dense,
  rows: number,
  cols: number,
  log: boolean,
): Launch {
  const bindings: RowBinding[] = [
    { name: 'x', t: x, extent: x.size, mode: 'read' },
    { name: 'out', t: out, extent: out.size, mode: 'store' },
  ];
  const body = `let cols = prm[1];
  let xb = prm[2] + row * cols;
  let ob = prm[3] + row * cols;
  var m = ld_x(xb);
  for (var c = 1u; c < cols; c++) { m = max(m, ld_x(xb + c)); }
  var s = 0.0;
  for (var c = 0u; c < cols; c++) { s += exp(ld_x(xb + c) - m); }
  ${
    log
      ? 'let ls = log(s);\n  for (var c = 0u; c < cols; c++) { st_out(ob + c, ld_x(xb + c) - m - ls); }'
      : 'let r = 1.0 / s;\n  for (var c = 0u; c < cols; c++) { st_out(ob + c, exp(ld_x(xb + c) - m) * r); }'
  }`;
  const program = rowProgram('softmax', log ? 'log' : 'exp', bindings, body);
  return rowLaunch(program, bindings, new Params().u(rows).u(cols).u(x.offset).u(out.offset), rows);
}

export function layerNormLaunch(
  x: Dense,
  weight: Dense | null,
  bias: Dense | null,
  eps: number,
  out: Dense,
  mean: Dense,
  rstd: Dense,
  rows: number,
  cols: number,
): Launch {
  const bindings: RowBinding[] = [{ name: 'x', t: x, extent: x.size, mode: 'read' }];
  if (weight) bindings.push({ name: 'w', t: weight, extent: cols, mode: 'read' });
  if (bias) bindings.push({ name: 'b', t: bias, extent: cols, mode: 'read' });
  bindings.push(
    { name: 'out', t: out, extent: out.size, mode: 'store' },
    { name: 'mean', t: mean, extent: rows, mode: 'store' },
    { name: 'rstd', t: rstd, extent: rows, mode: 'store' },
  );
  const params = new Params()
    .u(rows)
    .u(cols)
    .u(x.offset)
    .u(out.offset)
    .u(mean.offset)
    .u(rstd.offset)
    .u(weight?.offset ?? 0)
    .u(bias?.offset ?? 0)
    .f(eps);
  const wExpr = weight ? ' * ld_w(prm[6] + c)' : '';
  const bExpr = bias ? ' + ld_b(prm[7] + c)' : '';
  const body = `let cols = prm[1];
  let xb = prm[2] + row * cols;
  var s = 0.0;
  for (var c = 0u; c < cols; c++) { s += ld_x(xb + c); }
  let mu = s / f32(cols);
  var v = 0.0;
  for (var c = 0u; c < cols; c++) { let d = ld_x(xb + c) - mu; v += d * d; }
  let r = inverseSqrt(v / f32(cols) + pf(8u));
  st_mean(prm[4] + row, mu);
  st_rstd(prm[5] + row, r);
  for (var c = 0u; c < cols; c++) { st_out(prm[3] + row * cols + c, (ld_x(xb + c) - mu) * r${wExpr}${bExpr}); }`;
  const program = rowProgram('layerNorm', `${!!weight}${!!bias}`, bindings, body);
  return rowLaunch(program, bindings, params, rows);
}

export function layerNormBackwardLaunches(
  dy: Dense,
  x: Dense,
  weight: Dense | null,
  mean: Dense,
  rstd: Dense,
  dx: Dense,
  dWeight: Dense | null,
  dBias: Dense | null,
  rows: number,
  cols: number,
): Launch[] {
  const launches: Launch[] = [];
  const common: RowBinding[] = [
    { name: 'dy', t: dy, extent: dy.size, mode: 'read' },
    { name: 'x', t: x, extent: x.size, mode: 'read' },
    { name: 'mean', t: mean, extent: rows, mode: 'read' },
    { name: 'rstd', t: rstd, extent: rows, mode: 'read' },
  ];
  const base = new Params()
    .u(rows)
    .u(cols)
    .u(dy.offset)
    .u(x.offset)
    .u(mean.offset)
    .u(rstd.offset)
    .u(weight?.offset ?? 0)
    .u(dx.offset);
  const bindings: RowBinding[] = [...common];
  if (weight) bindings.push({ name: 'w', t: weight, extent: cols, mode: 'read' });
  bindings.push({ name: 'dx', t: dx, extent: dx.size, mode: 'store' });
  const g = weight ? 'ld_dy(db + c) * ld_w(prm[6] + c)' : 'ld_dy(db + c)';
  const body = `let cols = prm[1];
  let db = prm[2] + row * cols;
  let xb = prm[3] + row * cols;
  let mu = ld_mean(prm[4] + row);
  let r = ld_rstd(prm[5] + row);
  var sg = 0.0;
  var sgx = 0.0;
  for (var c = 0u; c < cols; c++) {
    let gv = ${g};
    sg += gv;
    sgx += gv * (ld_x(xb + c) - mu) * r;
  }
  let mg = sg / f32(cols);
  let mgx = sgx / f32(cols);
  for (var c = 0u; c < cols; c++) {
    let gv = ${g};
    let xh = (ld_x(xb + c) - mu) * r;
    st_dx(prm[7] + row * cols + c, r * (gv - mg - xh * mgx));
  }`;
  launches.push(
    rowLaunch(rowProgram('layerNormBackward', `${!!weight}`, bindings, body), bindings, base, rows),
  );
  if (dWeight || dBias) {
    // Column sums: one invocation per column (the "row" index is the column here).
    const cb: RowBinding[] = [...common];
    if (dWeight) cb.push({ name: 'dw', t: dWeight, extent: cols, mode: 'store' });
    if (dBias) cb.push({ name: 'dbias', t: dBias, extent: cols, mode: 'store' });
    const params = new Params()
      .u(cols)
      .u(rows)
      .u(dy.offset)
      .u(x.offset)
      .u(mean.offset)
      .u(rstd.offset)
      .u(dWeight?.offset ?? 0)
      .u(dBias?.offset ?? 0);
    const colBody = `let c = row;
  let cols = prm[0];
  let rows = prm[1];
  var sw = 0.0;
  var sb = 0.0;
  for (var r = 0u; r < rows; r++) {
    let d = ld_dy(prm[2] + r * cols + c);
    sb += d;
    sw += d * (ld_x(prm[3] + r * cols + c) - ld_mean(prm[4] + r)) * ld_rstd(prm[5] + r);
  }
  ${dWeight ? 'st_dw(prm[6] + c, sw);' : ''}
  ${dBias ? 'st_dbias(prm[7] + c, sb);' : ''}`;
    launches.push(
      rowLaunch(
        rowProgram('layerNormParamGrads', `${!!dWeight}${!!dBias}`, cb, colBody),
        cb,
        params,
        cols,
      ),
    );
  }
  return launches;
}

export const ERROR_CODE = { gather: 1, scatterAdd: 2, crossEntropy: 3, crossEntropyBackward: 4 };

export function crossEntropyLaunch(
  logits: Dense,
  targets: Dense,
  losses: Dense,
  ignoreIndex: number,
  rows: number,
  cols: number,
  backward: { dLosses: Dense; dLogits: Dense } | null,
): Launch {
  const bindings: RowBinding[] = [
    { name: 'x', t: logits, extent: logits.size, mode: 'read' },
    { name: 't', t: targets, extent: rows, mode: 'read' },
  ];
  if (backward) {
    bindings.push(
      { name: 'dl', t: backward.dLosses, extent: rows, mode: 'read' },
      { name: 'out', t: backward.dLogits, extent: backward.dLogits.size, mode: 'store' },
    );
  } else {
    bindings.push({ name: 'out', t: losses, extent: rows, mode: 'store' });
  }
  const code = backward ? ERROR_CODE.crossEntropyBackward : ERROR_CODE.crossEntropy;
  const params = new Params()
    .u(rows)
    .u(cols)
    .u(logits.offset)
    .u(targets.offset)
    .u(backward ? backward.dLogits.offset : losses.offset)
    .i(ignoreIndex)
    .u(backward ? backward.dLosses.offset : 0);
  const finish = backward
    ? `let ob = prm[4] + row * cols;
  if (ignored) {
    for (var c = 0u; c < cols; c++) { st_out(ob + c, 0.0); }
    return;
  }
  let scale = ld_dl(prm[6] + row) / s;
  for (var c = 0u; c < cols; c++) {
    let p = exp(ld_x(xb + c) - m) * scale;
    st_out(ob + c, select(p, p - ld_dl(prm[6] + row), c == u32(tc)));
  }`
    : `if (ignored) { st_out(prm[4] + row, 0.0); return; }
  st_out(prm[4] + row, m + log(s) - ld_x(xb + u32(tc)));`;
  const body = `let cols = prm[1];
  let xb = prm[2] + row * cols;
  let t = ld_t(prm[3] + row);
  let ignored = t == pi(5u);
  var tc = t;
  if (!ignored && (t < 0 || u32(t) >= cols)) {
    raise(${code}u, t, cols);
    tc = 0;
  }
  var m = ld_x(xb);
  for (var c = 1u; c < cols; c++) { m = max(m, ld_x(xb + c)); }
  var s = 0.0;
  for (var c = 0u; c < cols; c++) { s += exp(ld_x(xb + c) - m); }
  ${finish}`;
  const program = rowProgram(
    backward ? 'crossEntropyBackward' : 'crossEntropy',
    '',
    bindings,
    body,
    true,
  );
  return rowLaunch(program, bindings, params, rows, true);
}

// ---- indexing ---------------------------------------------------------------------------------

export function gatherLaunch(
  table: Dense,
  indices: Dense,
  out: Dense,
  vocab: number,
  dim: number,
): Launch {
  const body = `fn outv(i: u32) -> u32 {
  let d = prm[5];
  let r = i / d;
  var id = ld_idx(prm[3] + r);
  if (id < 0 || u32(id) >= prm[4]) {
    raise(${ERROR_CODE.gather}u, id, prm[4]);
    id = 0;
  }
  return raw_table(prm[2] + u32(id) * d + i % d);
}`;
  const program = elementwiseProgram({
    name: 'gather',
    key: '',
    inputs: [
      { name: 'table', dtype: table.dtype },
      { name: 'idx', dtype: 'i32' },
    ],
    out: out.dtype,
    raw: true,
    body,
    usesError: true,
  });
  return ewLaunch(
    program,
    [table.dtype, 'i32', out.dtype],
    [input(table, table.size), input(indices, indices.size)],
    out,
    header(out).u(table.offset).u(indices.offset).u(vocab).u(dim),
    true,
  );
}

/**
 * Deterministic scatter-add: one invocation per column d walks the indices in order, so every
 * output element receives its contributions in index order, as the CPU backend adds them.
 */
export function scatterAddLaunch(
  src: Dense,
  indices: Dense,
  out: Dense,
  rows: number,
  vocab: number,
  dim: number,
): Launch {
  // A packed 16-bit output is atomic, so it is read with atomicLoad; otherwise through its loader.
  const ldOut = () =>
    !is16(out.dtype)
      ? 'ld_out(j)'
      : out.dtype === 'f16'
        ? 'f16_to_f32((atomicLoad(&out[j >> 1u]) >> ((j & 1u) << 4u)) & 0xffffu)'
        : 'bitcast<f32>(((atomicLoad(&out[j >> 1u]) >> ((j & 1u) << 4u)) & 0xffffu) << 16u)';
  const program: Program = {
    name: 'scatterAdd',
    key: `scatterAdd:${src.dtype}:${out.dtype}`,
    workgroupSize: [64, 1, 1],
    dispatch: (s) => linearDispatch(s[0] ?? 1, 64),
    wgsl: () => `${CONVERT}
${declare(0, 'src', src.dtype, 'read')}
${loader('src', src.dtype)}
${declare(1, 'idx', 'i32', 'read')}
${declare(2, 'out', out.dtype, storeAccess(out.dtype))}
${storer('out', out.dtype)}
${is16(out.dtype) ? '' : loader('out', out.dtype)}
${paramsDecl(3)}
${errorDecl(4)}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u) {
  let d = ${linearIndex(64)};
  let dim = prm[0];
  if (d >= dim) { return; }
  for (var r = 0u; r < prm[1]; r++) {
    let id = idx[prm[4] + r];
    if (id < 0 || u32(id) >= prm[2]) {
      if (d == 0u) { raise(${ERROR_CODE.scatterAdd}u, id, prm[2]); }
      continue;
    }
    let j = prm[5] + u32(id) * dim + d;
    st_out(j, ${ldOut()} + ld_src(prm[3] + r * dim + d));
  }
}`,
  };
  return {
    program,
    dtypes: [src.dtype, 'i32', out.dtype],
    bindings: [input(src, src.size), input(indices, rows), output(out, out.size)],
    params: new Params()
      .u(dim)
      .u(rows)
      .u(vocab)
      .u(src.offset)
      .u(indices.offset)
      .u(out.offset)
      .toArray(),
    shape: [dim],
    usesError: true,
  };
}

// ---- checks, optimizers ----------------------------------------------------------------------

export function checkFiniteLaunch(x: Dense, flag: Dense): Launch {
  const bits =
    x.dtype === 'f32'
      ? { mask: '0x7f800000u', raw: 'raw_x(prm[1] + i)' }
      : x.dtype === 'f16'
        ? { mask: '0x7c00u', raw: 'raw_x(prm[1] + i)' }
        : { mask: '0x7f80u', raw: 'raw_x(prm[1] + i)' };
  const program: Program = {
    name: 'checkFinite',
    key: `checkFinite:${x.dtype}`,
    workgroupSize: [64, 1, 1],
    dispatch: (s) => linearDispatch(s[0] ?? 1, 64),
    wgsl: () => `${declare(0, 'x', x.dtype, 'read')}
${rawLoader('x', x.dtype)}
${declare(1, 'flag', 'i32', 'read_write')}
${paramsDecl(2)}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u) {
  let i = ${linearIndex(64)};
  if (i >= prm[0]) { return; }
  if ((${bits.raw} & ${bits.mask}) == ${bits.mask}) { flag[prm[2]] = 1; }
}`,
  };
  return {
    program,
    dtypes: [x.dtype, 'i32'],
    bindings: [input(x, x.size), output(flag, 1)],
    params: new Params().u(x.size).u(x.offset).u(flag.offset).toArray(),
    shape: [x.size],
    usesError: false,
  };
}

function optimizerProgram(
  name: string,
  key: string,
  grad: DType,
  states: string[],
  body: string,
): Program {
  return {
    name,
    key: `${name}:${key}:${grad}`,
    workgroupSize: [64, 1, 1],
    dispatch: (s) => linearDispatch(s[0] ?? 1, 64),
    wgsl: () => {
      const lines = [CONVERT, declare(0, 'grad', grad, 'read'), loader('grad', grad)];
      states.forEach((s, k) => {
        lines.push(declare(k + 1, s, 'f32', 'read_write'));
      });
      lines.push(paramsDecl(states.length + 1));
      lines.push(`@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u) {
  let i = ${linearIndex(64)};
  if (i >= prm[0]) { return; }
  ${body}
}`);
      return lines.join('\n');
    },
  };
}

export interface AdamScalars {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  decoupled: boolean;
  gradScale: number;
  biasCorrection1: number;
  biasCorrection2Sqrt: number;
}

export function adamLaunch(
  param: Dense,
  grad: Dense,
  expAvg: Dense,
  expAvgSq: Dense,
  h: AdamScalars,
): Launch {
  const body = `let pj = prm[1] + i;
  let mj = prm[3] + i;
  let vj = prm[4] + i;
  var p = param[pj];
  var gv = ld_grad(prm[2] + i) * pf(5u);
  ${h.decoupled ? 'p = p * (1.0 - pf(6u) * pf(9u));' : 'gv = gv + pf(9u) * p;'}
  let m = expAvg[mj] + (1.0 - pf(7u)) * (gv - expAvg[mj]);
  let v = expAvgSq[vj] * pf(8u) + (1.0 - pf(8u)) * gv * gv;
  expAvg[mj] = m;
  expAvgSq[vj] = v;
  let denom = sqrt(v) / pf(11u) + pf(12u);
  param[pj] = p - (pf(6u) / pf(10u)) * (m / denom);`;
  const program = optimizerProgram(
    'adam',
    h.decoupled ? 'w' : 'l2',
    grad.dtype,
    ['param', 'expAvg', 'expAvgSq'],
    body,
  );
  const params = new Params()
    .u(param.size)
    .u(param.offset)
    .u(grad.offset)
    .u(expAvg.offset)
    .u(expAvgSq.offset)
    .f(h.gradScale)
    .f(h.lr)
    .f(h.beta1)
    .f(h.beta2)
    .f(h.weightDecay)
    .f(h.biasCorrection1)
    .f(h.biasCorrection2Sqrt)
    .f(h.eps);
  return {
    program,
    dtypes: [grad.dtype, 'f32', 'f32', 'f32'],
    bindings: [
      input(grad, grad.size),
      output(param, param.size),
      output(expAvg, expAvg.size),
      output(expAvgSq, expAvgSq.size),
    ],
    params: params.toArray(),
    shape: [param.size],
    usesError: false,
  };
}

export interface SgdScalars {
  lr: number;
  momentum: number;
  dampening: number;
  weightDecay: number;
  nesterov: boolean;
  firstStep: boolean;
  gradScale: number;
}

export function sgdLaunch(param: Dense, grad: Dense, buffer: Dense | null, h: SgdScalars): Launch {
  const momentum = buffer !== null;
  const update = momentum
    ? `let b = ${h.firstStep ? 'gv' : 'pf(4u) * buf[prm[3] + i] + (1.0 - pf(5u)) * gv'};
  buf[prm[3] + i] = b;
  ${h.nesterov ? 'gv = gv + pf(4u) * b;' : 'gv = b;'}`
    : '';
  const body = `let pj = prm[1] + i;
  let p = param[pj];
  var gv = ld_grad(prm[2] + i) * pf(7u) + pf(6u) * p;
  ${update}
  param[pj] = p - pf(8u) * gv;`;
  const key = `${momentum}${h.firstStep}${h.nesterov}`;
  const program = optimizerProgram(
    'sgd',
    key,
    grad.dtype,
    momentum ? ['param', 'buf'] : ['param'],
    body,
  );
  const params = new Params()
    .u(param.size)
    .u(param.offset)
    .u(grad.offset)
    .u(buffer?.offset ?? 0)
    .f(h.momentum)
    .f(h.dampening)
    .f(h.weightDecay)
    .f(h.gradScale)
    .f(h.lr);
  const bindings = [input(grad, grad.size), output(param, param.size)];
  if (buffer) bindings.push(output(buffer, buffer.size));
  return {
    program,
    dtypes: momentum ? [grad.dtype, 'f32', 'f32'] : [grad.dtype, 'f32'],
    bindings,
    params: params.toArray(),
    shape: [param.size],
    usesError: false,
  };
}
