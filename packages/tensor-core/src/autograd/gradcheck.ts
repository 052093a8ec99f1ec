import { ArgumentError } from '../errors.js';
import { Tensor } from '../tensor.js';
import { AutogradError } from './errors.js';
import { noGrad } from './grad-mode.js';

/** Options of `gradcheck`. */
export interface GradcheckOptions {
  /** Finite-difference step. Default 1e-6. */
  eps?: number;
  /** Absolute tolerance. Default 1e-6. */
  atol?: number;
  /** Relative tolerance. Default 1e-5. */
  rtol?: number;
  /**
   * Outputs up to this many elements get the full Jacobian checked, entry by entry (one backward
   * per output element). Larger outputs are checked through `projections` random projections.
   * Default 256.
   */
  maxJacobianOutputs?: number;
  /** How many independent random projections check an output above `maxJacobianOutputs`. Default 4. */
  projections?: number;
  /** Seed of the projections' weights. Default 0. */
  seed?: number;
}

/** Result of `gradcheck`. */
export interface GradcheckResult {
  /** The largest difference between an analytic and a numeric value. */
  maxAbsError: number;
  /**
   * How many values were compared: the Jacobian's entries (output elements times checked input
   * elements) or, with projections, projections times checked input elements.
   */
  checked: number;
  /** Whether the full Jacobian or random projections of it were compared. */
  mode: 'jacobian' | 'projections';
}

/** Standard normal weights from a seeded xorshift stream (Box-Muller): one projection. */
function gaussianWeights(n: number, seed: number): Float64Array {
  let state = (seed ^ 0x9e3779b9) >>> 0 || 1;
  const uniform = (): number => {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return (state + 1) / 4294967297;
  };
  const w = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    w[i] = Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform());
  }
  return w;
}

/**
 * Check autograd's gradients of `fn` against central finite differences, like
 * `torch.autograd.gradcheck`. Inputs that require grad must be f64 (the CPU backend), and so must
 * the output, for the differences to be meaningful.
 *
 * [Note: what gradcheck compares]
 * For an output of at most `maxJacobianOutputs` elements it compares the whole Jacobian, as
 * PyTorch does: row j of the analytic Jacobian is the gradient of the inputs from one backward
 * seeded with the one-hot vector e_j (the graph is retained between rows), column i of the
 * numeric one is (f(x + eps e_i) - f(x - eps e_i)) / 2 eps, and every entry must agree within
 * atol + rtol |numeric|. A gradient formula that sends a right total to a wrong place (a transposed
 * or shifted index, a broadcast summed over the wrong axis) can pass a check of one weighted sum of
 * the outputs; it cannot pass this one, and the error names the entry.
 *
 * A larger output would need one backward per element, so it is checked through several
 * independent projections instead: for Gaussian weights w, the analytic J^T w is compared with
 * the numeric (f(x + eps e_i) - f(x - eps e_i)) . w / 2 eps. If the Jacobians differ by D, the
 * miss on input element i, (D^T w)_i, is normal with deviation ||D e_i||, so one projection
 * misses a wrong column only when w lands in a set of measure zero, and what a finite tolerance
 * can hide shrinks geometrically with the number of projections (all k land within c ||D e_i||
 * of zero with probability below (0.8 c)^k). Fixed weights would not do: a bug with the weights'
 * pattern (an index off by their period) would pass every time. Both modes cost two forwards per
 * input element; they differ in backwards (output size against `projections`).
 *
 * Throws `AutogradError` naming the first mismatching entry; resolves with the largest error.
 */
export async function gradcheck(
  fn: (...inputs: Tensor[]) => Tensor,
  inputs: readonly Tensor[],
  options: GradcheckOptions = {},
): Promise<GradcheckResult> {
  const eps = options.eps ?? 1e-6;
  const atol = options.atol ?? 1e-6;
  const rtol = options.rtol ?? 1e-5;
  const maxJacobianOutputs = options.maxJacobianOutputs ?? 256;
  const projections = options.projections ?? 4;
  if (!Number.isInteger(projections) || projections < 1) {
    throw new ArgumentError('gradcheck', `projections ${projections} is not a positive integer`);
  }
  const checkedInputs = inputs.filter((x) => x.requiresGrad);
  for (const x of checkedInputs) {
    if (x.dtype !== 'f64') {
      throw new ArgumentError('gradcheck', `input ${x} must be f64 for finite differences`);
    }
  }
  const clearGrads = (): void => {
    for (const x of checkedInputs) {
      x.grad?.free();
      x.grad = null;
    }
  };
  clearGrads();

  // Analytic side: J^T s for each seed s (one-hot rows, or projection weights).
  const out = fn(...inputs);
  if (out.dtype !== 'f64') {
    out.free();
    throw new ArgumentError('gradcheck', `output ${out} must be f64 for finite differences`);
  }
  const m = out.size;
  const mode = m <= maxJacobianOutputs ? 'jacobian' : 'projections';
  const seeds: Float64Array[] = [];
  if (mode === 'jacobian') {
    for (let j = 0; j < m; j++) {
      const e = new Float64Array(m);
      e[j] = 1;
      seeds.push(e);
    }
  } else {
    for (let p = 0; p < projections; p++) {
      seeds.push(gaussianWeights(m, (options.seed ?? 0) * 7919 + p));
    }
  }
  const analytic: Float64Array[][] = [];
  const seedTensor = Tensor.empty(out.backend, out.shape, 'f64');
  try {
    for (const [s, seed] of seeds.entries()) {
      clearGrads();
      seedTensor.write(seed);
      await out.backward(seedTensor, { retainGraph: s < seeds.length - 1 });
      const row: Float64Array[] = [];
      for (const x of checkedInputs) {
        row.push(x.grad ? Float64Array.from(await x.grad.read()) : new Float64Array(x.size));
      }
      analytic.push(row);
    }
  } finally {
    clearGrads();
    seedTensor.free();
    out.free();
  }

  // Numeric side: one column of the Jacobian per input element, from two forwards.
  const evaluate = async (): Promise<Float64Array> => {
    const y = noGrad(() => fn(...inputs));
    try {
      return Float64Array.from(await y.read());
    } finally {
      y.free();
    }
  };
  let maxAbsError = 0;
  let checked = 0;
  for (const [k, x] of inputs.entries()) {
    if (!x.requiresGrad) continue;
    const slot = checkedInputs.indexOf(x);
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
      for (const [s, seed] of seeds.entries()) {
        let numeric = 0;
        if (mode === 'jacobian') numeric = (plus[s]! - minus[s]!) / (2 * eps);
        else for (let j = 0; j < m; j++) numeric += ((plus[j]! - minus[j]!) / (2 * eps)) * seed[j]!;
        const a = analytic[s]![slot]![i]!;
        const error = Math.abs(numeric - a);
        maxAbsError = Math.max(maxAbsError, error);
        checked++;
        if (!(error <= atol + rtol * Math.abs(numeric))) {
          const where = mode === 'jacobian' ? `output element ${s}` : `projection ${s}`;
          throw new AutogradError(
            'gradcheck',
            `input ${k} element ${i}, ${where}: analytic ${a} vs numeric ${numeric} (error ${error})`,
          );
        }
      }
    }
  }
  return { maxAbsError, checked, mode };
}
