import { noGrad } from './grad-mode.js';
import { mul, sum } from '../ops/index.js';
import { Tensor } from '../tensor.js';
import { ArgumentError } from '../errors.js';
import { AutogradError } from './errors.js';

/** Options of `gradcheck`. */
export interface GradcheckOptions {
  /** Finite-difference step. Default 1e-6. */
  eps?: number;
  /** Absolute tolerance. Default 1e-6. */
  atol?: number;
  /** Relative tolerance. Default 1e-5. */
  rtol?: number;
}

/** Result of `gradcheck`: the largest difference between analytic and numeric gradients. */
export interface GradcheckResult {
  maxAbsError: number;
  checked: number;
}

/** Fixed, non-uniform weights for the scalar loss sum(out * w), so every output element matters. */
function weightsFor(n: number): Float64Array {
  const w = new Float64Array(n);
  for (let i = 0; i < n; i++) w[i] = 0.5 + ((i * 7919) % 13) / 13;
  return w;
}

function dot(values: ArrayLike<number>, w: Float64Array): number {
  let s = 0;
  for (let i = 0; i < w.length; i++) s += values[i]! * w[i]!;
  return s;
}

/**
 * Check autograd's gradients of `fn` against central finite differences, like
 * `torch.autograd.gradcheck`. Inputs must be f64 (the CPU backend) for the differences to be
 * meaningful; the gradient is checked for each input with `requiresGrad`. The scalar being
 * differentiated is sum(fn(inputs) * w) with fixed non-uniform weights w. Throws `AutogradError`
 * listing the first mismatching element; resolves with the largest error otherwise.
 */
export async function gradcheck(
  fn: (...inputs: Tensor[]) => Tensor,
  inputs: readonly Tensor[],
  options: GradcheckOptions = {},
): Promise<GradcheckResult> {
  const eps = options.eps ?? 1e-6;
  const atol = options.atol ?? 1e-6;
  const rtol = options.rtol ?? 1e-5;
  for (const x of inputs) {
    if (x.requiresGrad && x.dtype !== 'f64') {
      throw new ArgumentError('gradcheck', `input ${x} must be f64 for finite differences`);
    }
    x.grad?.free();
    x.grad = null;
  }
  const out = fn(...inputs);
  const w = weightsFor(out.size);
  const wTensor = Tensor.empty(out.backend, out.shape, out.dtype).write(w);
  const weighted = mul(out, wTensor);
  const loss = sum(weighted);
  try {
    await loss.backward();
  } finally {
    for (const t of [out, wTensor, weighted, loss]) t.free();
  }
  const evaluate = async (): Promise<number> => {
    const y = noGrad(() => fn(...inputs));
    const v = dot(await y.read(), w);
    y.free();
    return v;
  };
  let maxAbsError = 0;
  let checked = 0;
  for (const [k, x] of inputs.entries()) {
    if (!x.requiresGrad) continue;
    const analytic = x.grad ? await x.grad.read() : new Float64Array(x.size);
    const values = Float64Array.from(await x.read());
    for (let i = 0; i < x.size; i++) {
      const original = values[i]!;
      values[i] = original + eps;
      x.write(values);
      const plus = await evaluate();
      values[i] = original - eps;
      x.write(values);
      const minus = await evaluate();
      values[i] = original;
      x.write(values);
      const numeric = (plus - minus) / (2 * eps);
      const error = Math.abs(numeric - analytic[i]!);
      maxAbsError = Math.max(maxAbsError, error);
      checked++;
      if (!(error <= atol + rtol * Math.abs(numeric))) {
        throw new AutogradError(
          'gradcheck',
          `input ${k} element ${i}: analytic ${analytic[i]} vs numeric ${numeric} (error ${error})`,
        );
      }
    }
  }
  return { maxAbsError, checked };
}
