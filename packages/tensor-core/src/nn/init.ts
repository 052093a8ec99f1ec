import type { Backend } from '../backend/backend.js';
import type { DType } from '../dtype.js';
import { full, rand, randn } from '../ops/index.js';
import { getDefaultGenerator, type RandomGenerator } from '../random/generator.js';
import type { Tensor } from '../tensor.js';

/**
 * Where a layer creates its parameters and which random stream initializes them. Defaults: the
 * default backend (`setDefaultBackend`), f32 and the default generator (`manualSeed`).
 */
export interface LayerOptions {
  backend?: Backend;
  dtype?: DType;
  generator?: RandomGenerator;
  /**
   * Make the random parameters zeros instead of drawing them, the generator advanced as if they
   * had been drawn ([Note: an init that is overwritten]): for weights the caller initializes
   * again or loads, like PyTorch's `torch.nn.utils.skip_init`. Default false.
   */
  skipInit?: boolean;
}

/*
 * [Note: an init that is overwritten]
 * nanoGPT builds its layers with PyTorch's default init and then draws every weight again (N(0,
 * 0.02)); the GPT here does the same, so that its draws come at the same counters as they always
 * have (the same seed gives the same model as before, bit for bit). For GPT-2 124M the first draws
 * are 163 M values of 287 M (the Linears' uniforms, the untied embedding's normals), some 0.2 us
 * each on one core: half of a tab's model build, all thrown away. With `skipInit` a layer takes
 * the counters its draws would have taken (`generator.next(count)`) and fills zeros, so every later
 * draw is where it was.
 */
function skipped(shape: readonly number[], options: LayerOptions): Tensor | null {
  if (options.skipInit !== true) return null;
  const out = full(shape, 0, { backend: options.backend, dtype: options.dtype });
  (options.generator ?? getDefaultGenerator()).next(out.size);
  return out;
}

/** Uniform in [-bound, bound), PyTorch's `init.uniform_`. */
export function uniformInit(
  shape: readonly number[],
  bound: number,
  options: LayerOptions = {},
): Tensor {
  const zeros = skipped(shape, options);
  if (zeros !== null) return zeros;
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
  const zeros = skipped(shape, options);
  if (zeros !== null) return zeros;
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
