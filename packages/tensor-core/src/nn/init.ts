import type { Backend } from '../backend/backend.js';
import type { DType } from '../dtype.js';
import { full, rand, randn } from '../ops/index.js';
import type { RandomGenerator } from '../random/generator.js';
import type { Tensor } from '../tensor.js';

/**
 * Where a layer creates its parameters and which random stream initializes them. Defaults: the
 * default backend (`setDefaultBackend`), f32 and the default generator (`manualSeed`).
 */
export interface LayerOptions {
  backend?: Backend;
  dtype?: DType;
  generator?: RandomGenerator;
}

/** Uniform in [-bound, bound), PyTorch's `init.uniform_`. */
export function uniformInit(
  shape: readonly number[],
  bound: number,
  options: LayerOptions = {},
): Tensor {
  return rand(shape, {
    backend: options.backend,
    dtype: options.dtype,
    generator: options.generator,
    low: -bound,
    high: bound,
  });
}

/** Normal with `mean`, `std`, PyTorch's `init.normal_`. */
export function normalInit(
  shape: readonly number[],
  mean: number,
  std: number,
  options: LayerOptions = {},
): Tensor {
  return randn(shape, {
    backend: options.backend,
    dtype: options.dtype,
    generator: options.generator,
    mean,
    std,
  });
}

/** Constant fill, PyTorch's `init.constant_` (ones, zeros). */
export function constantInit(
  shape: readonly number[],
  value: number,
  options: LayerOptions = {},
): Tensor {
  return full(shape, value, { backend: options.backend, dtype: options.dtype });
}

/**
 * The bound of PyTorch's `kaiming_uniform_(w, a=sqrt(5))`, the default init of Linear's weight:
 * gain sqrt(2 / (1 + a^2)) times sqrt(3 / fan_in), which is 1 / sqrt(fan_in).
 */
export function kaimingUniformBound(fanIn: number, a = Math.sqrt(5)): number {
  const gain = Math.sqrt(2 / (1 + a * a));
  return fanIn === 0 ? 0 : gain * Math.sqrt(3 / fanIn);
}
