/** Scalar math shared by the CPU kernels, in double precision. */

const SQRT_2_OVER_PI = Math.sqrt(2 / Math.PI);
const GELU_TANH_C = 0.044715;
const INV_SQRT_2 = Math.SQRT1_2;
const INV_SQRT_2PI = 1 / Math.sqrt(2 * Math.PI);

/**
 * erf to about 1e-15: the Maclaurin series below |x| = 3 (cancellation costs at most e^9 ulps) and
 * the continued fraction of erfc above it. Accurate enough for f64 gradient checks of GELU.
 */
export function erf(x: number): number {
  if (Number.isNaN(x)) return x;
  const ax = Math.abs(x);
  if (ax < 3) {
    const x2 = x * x;
    let term = x;
    let sum = x;
    for (let n = 1; n < 200; n++) {
      term *= -x2 / n;
      const add = term / (2 * n + 1);
      sum += add;
      if (Math.abs(add) < 1e-17 * Math.abs(sum)) break;
    }
    return (2 / Math.sqrt(Math.PI)) * sum;
  }
  if (ax > 6) return Math.sign(x);
  // erfc(ax) = exp(-ax^2)/sqrt(pi) / (ax + (1/2)/(ax + 1/(ax + (3/2)/(ax + ...)))).
  let fraction = ax;
  for (let n = 60; n >= 1; n--) fraction = ax + n / 2 / fraction;
  const erfc = Math.exp(-ax * ax) / Math.sqrt(Math.PI) / fraction;
  return Math.sign(x) * (1 - erfc);
}

export function gelu(x: number): number {
  return 0.5 * x * (1 + erf(x * INV_SQRT_2));
}

export function geluTanh(x: number): number {
  return 0.5 * x * (1 + Math.tanh(SQRT_2_OVER_PI * (x + GELU_TANH_C * x * x * x)));
}

export function geluDerivative(x: number): number {
  return 0.5 * (1 + erf(x * INV_SQRT_2)) + x * Math.exp(-0.5 * x * x) * INV_SQRT_2PI;
}

export function geluTanhDerivative(x: number): number {
  const t = Math.tanh(SQRT_2_OVER_PI * (x + GELU_TANH_C * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * SQRT_2_OVER_PI * (1 + 3 * GELU_TANH_C * x * x);
}

export function sigmoid(x: number): number {
  return x >= 0 ? 1 / (1 + Math.exp(-x)) : Math.exp(x) / (1 + Math.exp(x));
}
