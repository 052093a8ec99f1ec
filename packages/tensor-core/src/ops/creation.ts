import type { Backend } from '../backend/backend.js';
import type { DType } from '../dtype.js';
import { ArgumentError, ShapeError } from '../errors.js';
import { getDefaultGenerator, type RandomGenerator } from '../random/generator.js';
import { checkShape, shapeSize, Tensor, toHostArray } from '../tensor.js';
import { requireFloatDType, resolveBackend } from './validate.js';

/** Where and how to create a tensor. */
export interface CreateOptions {
  dtype?: DType;
  /** Defaults to `getDefaultBackend()`. */
  backend?: Backend;
}

/** Nested arrays of numbers, as `torch.tensor` accepts. */
export type NestedNumbers = number | readonly NestedNumbers[];

function inferShape(data: NestedNumbers): number[] {
  const shape: number[] = [];
  let level: NestedNumbers = data;
  while (Array.isArray(level)) {
    shape.push(level.length);
    if (level.length === 0) break;
    level = level[0] as NestedNumbers;
  }
  return shape;
}

function flattenNested(
  data: NestedNumbers,
  shape: readonly number[],
  depth: number,
  out: number[],
): void {
  if (depth === shape.length) {
    if (typeof data !== 'number') {
      throw new ShapeError('tensor', [shape], `ragged data: expected a number at depth ${depth}`);
    }
    out.push(data);
    return;
  }
  if (!Array.isArray(data) || data.length !== shape[depth]) {
    throw new ShapeError(
      'tensor',
      [shape],
      `ragged data: expected ${shape[depth]} elements at depth ${depth}`,
    );
  }
  for (const item of data) flattenNested(item as NestedNumbers, shape, depth + 1, out);
}

/**
 * A tensor from host data: a number, nested arrays or a flat typed array (with `shape`). The dtype
 * defaults to i32 for an Int32Array and f32 otherwise; f16/bf16 data given as numbers is rounded
 * to nearest even.
 */
export function tensor(
  data: NestedNumbers | ArrayLike<number>,
  options: CreateOptions & { shape?: readonly number[] } = {},
): Tensor {
  const backend = resolveBackend(options.backend);
  const dtype = options.dtype ?? (data instanceof Int32Array ? 'i32' : 'f32');
  let flat: ArrayLike<number>;
  let shape: readonly number[];
  if (typeof data === 'number') {
    flat = [data];
    shape = options.shape ?? [];
  } else if (Array.isArray(data)) {
    const inferred = inferShape(data as NestedNumbers);
    const values: number[] = [];
    flattenNested(data as NestedNumbers, inferred, 0, values);
    flat = values;
    shape = options.shape ?? inferred;
  } else {
    flat = data as ArrayLike<number>;
    shape = options.shape ?? [flat.length];
  }
  checkShape('tensor', shape);
  if (shapeSize(shape) !== flat.length) {
    throw new ShapeError(
      'tensor',
      [shape],
      `${flat.length} elements of data do not fill shape [${shape.join(', ')}]`,
    );
  }
  const out = Tensor.empty(backend, shape, dtype);
  if (flat.length > 0) backend.write(out.kernel('tensor'), toHostArray(flat, dtype));
  return out;
}

/** An uninitialized tensor. */
export function empty(shape: readonly number[], options: CreateOptions = {}): Tensor {
  return Tensor.empty(resolveBackend(options.backend), shape, options.dtype ?? 'f32');
}

/** A tensor filled with `value` (converted to the dtype). */
export function full(shape: readonly number[], value: number, options: CreateOptions = {}): Tensor {
  const out = empty(shape, options);
  out.backend.fill(out.kernel('full'), value);
  return out;
}

export function zeros(shape: readonly number[], options: CreateOptions = {}): Tensor {
  return full(shape, 0, options);
}

export function ones(shape: readonly number[], options: CreateOptions = {}): Tensor {
  return full(shape, 1, options);
}

/** Zeros of `like`'s shape, dtype and backend (each overridable). */
export function zerosLike(like: Tensor, options: CreateOptions = {}): Tensor {
  return full(like.shape, 0, { dtype: like.dtype, backend: like.backend, ...options });
}

export function onesLike(like: Tensor, options: CreateOptions = {}): Tensor {
  return full(like.shape, 1, { dtype: like.dtype, backend: like.backend, ...options });
}

export function fullLike(like: Tensor, value: number, options: CreateOptions = {}): Tensor {
  return full(like.shape, value, { dtype: like.dtype, backend: like.backend, ...options });
}

/**
 * `[start, end)` in steps of `step` (`arange(n)` is 0..n-1), like `torch.arange`. The dtype
 * defaults to i32 when all arguments are integers, f32 otherwise.
 */
export function arange(start: number, end?: number, step = 1, options: CreateOptions = {}): Tensor {
  const [lo, hi] = end === undefined ? [0, start] : [start, end];
  if (!Number.isFinite(lo) || !Number.isFinite(hi) || !Number.isFinite(step) || step === 0) {
    throw new ArgumentError(
      'arange',
      `start ${lo}, end ${hi}, step ${step} must be finite with step != 0`,
    );
  }
  const count = Math.max(0, Math.ceil((hi - lo) / step));
  const integral = [lo, hi, step].every(Number.isInteger);
  const dtype = options.dtype ?? (integral ? 'i32' : 'f32');
  const values = new Array<number>(count);
  for (let i = 0; i < count; i++) values[i] = lo + i * step;
  return tensor(values, { dtype, backend: options.backend, shape: [count] });
}

/** Options of the random creation ops. */
export interface RandomOptions extends CreateOptions {
  /** Defaults to the process-wide generator (`manualSeed`). */
  generator?: RandomGenerator;
}

/** Uniform values in [low, high) from Philox (see [Note: counter-based random numbers]). */
export function rand(
  shape: readonly number[],
  options: RandomOptions & { low?: number; high?: number } = {},
): Tensor {
  requireFloatDType('rand', options.dtype ?? 'f32');
  const out = empty(shape, options);
  const { seed, offset } = (options.generator ?? getDefaultGenerator()).next(out.size);
  out.backend.randomUniform(out.kernel('rand'), seed, offset, options.low ?? 0, options.high ?? 1);
  return out;
}

/** Normal values with the given mean and std from Philox + Box-Muller. */
export function randn(
  shape: readonly number[],
  options: RandomOptions & { mean?: number; std?: number } = {},
): Tensor {
  requireFloatDType('randn', options.dtype ?? 'f32');
  const out = empty(shape, options);
  const { seed, offset } = (options.generator ?? getDefaultGenerator()).next(out.size);
  out.backend.randomNormal(out.kernel('randn'), seed, offset, options.mean ?? 0, options.std ?? 1);
  return out;
}
