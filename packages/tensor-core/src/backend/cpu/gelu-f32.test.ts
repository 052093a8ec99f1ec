import { describe, expect, it } from 'vitest';
import { createCpuBackend } from '../../runtime.js';
import type { Backend, KernelTensor } from '../backend.js';
import { gelu, geluDerivative } from './math.js';

// The WASM kernels' GELU and its gradient against the float64 formulas
// of math.ts (erf to about 1e-15), evaluated on the same f32 inputs, over every binade of f32
// (subnormals to 3e38, both signs), a dense grid over [-10, 10] where erf is not +-1, and the
// special values. The bound is PyTorch's for float32 (`torch.testing.assert_close`'s defaults,
// which its OpInfo tests of erf and gelu use: rtol 1.3e-6, atol 1e-5), and a tighter one this
// kernel meets: the same rtol with an absolute error of 1.2e-6 (measured: 1.08e-6 for GELU at
// x = -5.556, where 1 + erf(x / sqrt 2) cancels as in PyTorch's f32 kernel; 5.8e-7 for the
// gradient at x = -5.567).
const backend = createCpuBackend();
const PYTORCH = { rtol: 1.3e-6, atol: 1e-5 };
const OURS = { rtol: 1.3e-6, atol: 1.2e-6 };

function inputs(): Float32Array {
  const values: number[] = [0, -0, 1e-45, -1e-45, 1.1754942e-38, -1.1754942e-38];
  for (let e = -149; e <= 127; e++)
    for (const m of [1, 1.37, 1.9]) values.push(m * 2 ** e, -m * 2 ** e);
  for (let i = -20000; i <= 20000; i++) values.push(i / 2000);
  return Float32Array.from(values.filter((v) => Number.isFinite(Math.fround(v))));
}

async function run(op: 'gelu' | 'geluGrad', x: Float32Array, dy?: Float32Array) {
  const tensor = (values: Float32Array): KernelTensor => {
    const t: KernelTensor = {
      storage: backend.allocate(values.length * 4),
      offset: 0,
      dtype: 'f32',
      shape: [values.length],
    };
    backend.write(t, values);
    return t;
  };
  const out = tensor(new Float32Array(x.length));
  if (op === 'gelu') (backend as Backend).unary('gelu', tensor(x), out);
  else (backend as Backend).binary('geluGrad', tensor(x), tensor(dy!), out);
  return (await backend.read(out)) as Float32Array;
}

/** The largest |got - expected| - rtol |expected| over the elements, and where. */
function worst(got: Float32Array, expected: number[], x: Float32Array, rtol: number) {
  let excess = Number.NEGATIVE_INFINITY;
  let at = 0;
  for (let i = 0; i < got.length; i++) {
    const e = Math.abs(got[i]! - expected[i]!) - rtol * Math.abs(expected[i]!);
    if (e > excess) [excess, at] = [e, x[i]!];
  }
  return { excess, at };
}

describe('GELU in f32 lanes', () => {
  const x = inputs();
  const dy = Float32Array.from(x, (_, i) => [1, -0.75, 3.5][i % 3]!);

  it("is within PyTorch's float32 tolerance of the float64 formula, and 1.2e-6 absolute", async () => {
    const got = await run('gelu', x);
    const expected = Array.from(x, (v) => gelu(v));
    for (const tolerance of [PYTORCH, OURS])
      expect(worst(got, expected, x, tolerance.rtol).excess).toBeLessThanOrEqual(tolerance.atol);
  });

  it('has a gradient within the same bounds of dy (Phi(x) + x phi(x)) in float64', async () => {
    const got = await run('geluGrad', x, dy);
    const expected = Array.from(x, (v, i) => dy[i]! * geluDerivative(v));
    for (const tolerance of [PYTORCH, OURS])
      expect(worst(got, expected, x, tolerance.rtol).excess).toBeLessThanOrEqual(tolerance.atol);
  });

  it('keeps signed zeros and subnormals as x / 2, and gives what PyTorch gives at inf and NaN', async () => {
    const special = Float32Array.from([
      0,
      -0,
      1e-45,
      -1e-45,
      3e-39,
      Infinity,
      -Infinity,
      Number.NaN,
    ]);
    const got = Array.from(await run('gelu', special));
    expect(got.slice(0, 5)).toEqual([0, -0, 0, -0, Math.fround(1.5e-39)]);
    // PyTorch 1.13 and 2.x: gelu(inf) = inf, gelu(-inf) = nan (-inf * 0), gelu(nan) = nan.
    expect(got.slice(5)).toEqual([Infinity, Number.NaN, Number.NaN]);
    const grad = Array.from(
      await run('geluGrad', special, new Float32Array(special.length).fill(1)),
    );
    expect(grad.slice(0, 5)).toEqual([0.5, 0.5, 0.5, 0.5, 0.5]);
    // PyTorch: the gradient at +-inf is nan (inf * exp(-inf)), and at nan nan.
    expect(grad.slice(5)).toEqual([Number.NaN, Number.NaN, Number.NaN]);
  });

  it('gives exactly x past erf = +-1 on the positive side, and the exact 0 or -0 far left', async () => {
    const far = Float32Array.from([6, 40, 1e10, 3e38, -6, -40, -1e10, -3e38]);
    const got = Array.from(await run('gelu', far));
    expect(got.slice(0, 4)).toEqual(Array.from(far.slice(0, 4)));
    for (const v of got.slice(4)) expect(Math.abs(v)).toBe(0);
  });
});
