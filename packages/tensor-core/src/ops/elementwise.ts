import type { BinaryOp, KernelTensor, UnaryOp } from '../backend/backend.js';
import { recordOp } from '../autograd/record.js';
import { ArgumentError, DTypeError } from '../errors.js';
import { Tensor } from '../tensor.js';
import { autocastOp } from './autocast-policy.js';
import { backendOf, broadcastShapes, requireFloat, requireSameDType } from './validate.js';

/** A tensor or a number (broadcast like a 0-d tensor of the other operand's dtype). */
export type Operand = Tensor | number;

const INT_UNARY: ReadonlySet<UnaryOp> = new Set(['neg', 'abs', 'square']);

function unaryOp(
  op: UnaryOp,
  name: string,
  input: Tensor,
  attrs: Record<string, unknown> = {},
): Tensor {
  return autocastOp(name, [input], ([x]) => unaryKernel(op, name, x, attrs));
}

function unaryKernel(op: UnaryOp, name: string, x: Tensor, attrs: Record<string, unknown>): Tensor {
  backendOf(name, [x]);
  if (!INT_UNARY.has(op)) requireFloat(name, x);
  const out = Tensor.empty(x.backend, x.shape, x.dtype);
  x.backend.unary(op, x.kernel(name), out.kernel(name));
  recordOp(name, [x], out, attrs);
  return out;
}

/** -x. */
export function neg(x: Tensor): Tensor {
  return unaryOp('neg', 'neg', x);
}
/** |x|. */
export function abs(x: Tensor): Tensor {
  return unaryOp('abs', 'abs', x);
}
export function exp(x: Tensor): Tensor {
  return unaryOp('exp', 'exp', x);
}
/** Natural logarithm. */
export function log(x: Tensor): Tensor {
  return unaryOp('log', 'log', x);
}
export function sqrt(x: Tensor): Tensor {
  return unaryOp('sqrt', 'sqrt', x);
}
/** 1 / sqrt(x). */
export function rsqrt(x: Tensor): Tensor {
  return unaryOp('rsqrt', 'rsqrt', x);
}
export function tanh(x: Tensor): Tensor {
  return unaryOp('tanh', 'tanh', x);
}
export function sigmoid(x: Tensor): Tensor {
  return unaryOp('sigmoid', 'sigmoid', x);
}
export function relu(x: Tensor): Tensor {
  return unaryOp('relu', 'relu', x);
}
/** x * x. */
export function square(x: Tensor): Tensor {
  return unaryOp('square', 'square', x);
}
/** 1 / x. */
export function reciprocal(x: Tensor): Tensor {
  return unaryOp('reciprocal', 'reciprocal', x);
}

/** GELU, exact (`approximate: 'none'`, PyTorch's default) or with the tanh approximation. */
export function gelu(x: Tensor, options: { approximate?: 'none' | 'tanh' } = {}): Tensor {
  const approximate = options.approximate ?? 'none';
  if (approximate !== 'none' && approximate !== 'tanh') {
    throw new ArgumentError('gelu', `approximate must be 'none' or 'tanh', got '${approximate}'`);
  }
  return unaryOp(approximate === 'tanh' ? 'geluTanh' : 'gelu', 'gelu', x, { approximate });
}

const INT_BINARY: ReadonlySet<BinaryOp> = new Set([
  'add',
  'sub',
  'mul',
  'maximum',
  'minimum',
  'eq',
  'ne',
  'lt',
  'le',
  'gt',
  'ge',
]);

/**
 * The binary kernel with validation: broadcasting shapes, one dtype, at least one tensor. Records
 * `record` (if given) with inputs [a or null, b or null] and the scalar operand in attrs.
 */
function binaryOp(op: BinaryOp, name: string, a: Operand, b: Operand, record: boolean): Tensor {
  const ta = typeof a === 'number' ? null : a;
  const tb = typeof b === 'number' ? null : b;
  return autocastOp(name, [ta, tb], ([ca, cb]) =>
    binaryKernel(op, name, ca ?? (a as number), cb ?? (b as number), record),
  );
}

function binaryKernel(op: BinaryOp, name: string, a: Operand, b: Operand, record: boolean): Tensor {
  const ta = typeof a === 'number' ? null : a;
  const tb = typeof b === 'number' ? null : b;
  const backend = backendOf(name, [ta, tb]);
  const dtype = requireSameDType(name, [ta, tb]);
  if (dtype === 'i32' && !INT_BINARY.has(op)) {
    throw new DTypeError(name, [dtype], 'is not defined for i32 tensors (cast to a float dtype)');
  }
  const shape = broadcastShapes(name, [ta?.shape ?? [], tb?.shape ?? []]);
  const out = Tensor.empty(backend, shape, dtype);
  const operand = (t: Operand): KernelTensor | number =>
    typeof t === 'number' ? t : t.kernel(name);
  backend.binary(op, operand(a), operand(b), out.kernel(name));
  if (record) {
    const attrs: Record<string, unknown> = {};
    if (ta === null) attrs.a = a;
    if (tb === null) attrs.b = b;
    recordOp(name, [ta, tb], out, attrs);
  }
  return out;
}

/** a + b with broadcasting; either may be a number. */
export function add(a: Operand, b: Operand): Tensor {
  return binaryOp('add', 'add', a, b, true);
}
/** a * b with broadcasting. */
export function mul(a: Operand, b: Operand): Tensor {
  return binaryOp('mul', 'mul', a, b, true);
}
/** a / b with broadcasting (floats only). */
export function div(a: Operand, b: Operand): Tensor {
  return binaryOp('div', 'div', a, b, true);
}
/** a ** b with broadcasting (floats only). */
export function pow(a: Operand, b: Operand): Tensor {
  return binaryOp('pow', 'pow', a, b, true);
}
/** Elementwise maximum (NaN wins). */
export function maximum(a: Operand, b: Operand): Tensor {
  return binaryOp('maximum', 'maximum', a, b, true);
}
/** Elementwise minimum (NaN wins). */
export function minimum(a: Operand, b: Operand): Tensor {
  return binaryOp('minimum', 'minimum', a, b, true);
}

/**
 * a - b. A composite: `add(a, -b)` for a number b, `add(a, neg(b))` for a tensor, so autograd
 * needs no gradient of its own for it.
 */
export function sub(a: Operand, b: Operand): Tensor {
  const ta = typeof a === 'number' ? null : a;
  const tb = typeof b === 'number' ? null : b;
  return autocastOp('sub', [ta, tb], ([ca, cb]) => subOf(ca ?? (a as number), cb ?? (b as number)));
}

function subOf(a: Operand, b: Operand): Tensor {
  if (typeof b === 'number') return add(a, -b);
  if (typeof a === 'number') return add(neg(b), a);
  backendOf('sub', [a, b]);
  requireSameDType('sub', [a, b]);
  broadcastShapes('sub', [a.shape, b.shape]);
  const negB = neg(b);
  try {
    return add(a, negB);
  } finally {
    negB.free();
  }
}

/** a == b as 1/0 in the operands' dtype. Not differentiable. */
export function eq(a: Operand, b: Operand): Tensor {
  return binaryOp('eq', 'eq', a, b, false);
}
export function ne(a: Operand, b: Operand): Tensor {
  return binaryOp('ne', 'ne', a, b, false);
}
export function lt(a: Operand, b: Operand): Tensor {
  return binaryOp('lt', 'lt', a, b, false);
}
export function le(a: Operand, b: Operand): Tensor {
  return binaryOp('le', 'le', a, b, false);
}
export function gt(a: Operand, b: Operand): Tensor {
  return binaryOp('gt', 'gt', a, b, false);
}
export function ge(a: Operand, b: Operand): Tensor {
  return binaryOp('ge', 'ge', a, b, false);
}

/**
 * Backward helpers for autograd: `dy * f'(x)` for relu and gelu in one kernel. Not recorded
 * (double backward through them is not supported).
 */
export function activationGrad(kind: 'relu' | 'gelu' | 'geluTanh', x: Tensor, dy: Tensor): Tensor {
  const name = `${kind}Grad`;
  requireFloat(name, x);
  return binaryOp(`${kind}Grad` as BinaryOp, name, x, dy, false);
}

/**
 * cond != 0 ? a : b, broadcasting all three. a and b are tensors or numbers of one dtype; cond may
 * have any dtype.
 */
export function where(cond: Tensor, a: Operand, b: Operand): Tensor {
  const ta = typeof a === 'number' ? null : a;
  const tb = typeof b === 'number' ? null : b;
  return autocastOp('where', [ta, tb], ([ca, cb]) =>
    whereOf(cond, ca ?? (a as number), cb ?? (b as number)),
  );
}

function whereOf(cond: Tensor, a: Operand, b: Operand): Tensor {
  const ta = typeof a === 'number' ? null : a;
  const tb = typeof b === 'number' ? null : b;
  const backend = backendOf('where', [cond, ta, tb]);
  if (ta === null && tb === null) {
    throw new ArgumentError('where', 'a and b are both numbers: give at least one tensor');
  }
  const dtype = requireSameDType('where', [ta, tb]);
  const shape = broadcastShapes('where', [cond.shape, ta?.shape ?? [], tb?.shape ?? []]);
  const out = Tensor.empty(backend, shape, dtype);
  const operand = (t: Operand): KernelTensor | number =>
    typeof t === 'number' ? t : t.kernel('where');
  backend.where(cond.kernel('where'), operand(a), operand(b), out.kernel('where'));
  const attrs: Record<string, unknown> = {};
  if (ta === null) attrs.a = a;
  if (tb === null) attrs.b = b;
  recordOp('where', [cond, ta, tb], out, attrs);
  return out;
}

/** x with `value` where mask != 0 (a composite of `where`). */
export function maskedFill(x: Tensor, mask: Tensor, value: number): Tensor {
  return where(mask, value, x);
}
