// CPU kernels over the last axis, row by row: softmax (and log-softmax), layer norm and its
// backward.
import type { KernelTensor } from '../backend.js';
import { outputValues, readValues } from './cpu-storage.js';

export function softmaxKernel(x: KernelTensor, out: KernelTensor, log: boolean): void {
  const xv = readValues(x);
  const o = outputValues(out);
  const v = o.values;
  const cols = x.shape.length === 0 ? 1 : x.shape[x.shape.length - 1]!;
  if (cols === 0) return;
  const rows = xv.length / cols;
  for (let r = 0; r < rows; r++) {
    const base = r * cols;
    let max = Number.NEGATIVE_INFINITY;
    for (let c = 0; c < cols; c++) max = Math.max(max, xv[base + c]!);
    if (max === Number.NEGATIVE_INFINITY) max = 0;
    let sum = 0;
    for (let c = 0; c < cols; c++) sum += Math.exp(xv[base + c]! - max);
    if (log) {
      const logSum = Math.log(sum) + max;
      for (let c = 0; c < cols; c++) v[base + c] = xv[base + c]! - logSum;
    } else {
      for (let c = 0; c < cols; c++) v[base + c] = Math.exp(xv[base + c]! - max) / sum;
    }
  }
  o.commit();
}

/**
 * Softmax's gradient, dx = y (dy - sum(dy y)) per row, for f32 and f64: each product and
 * difference rounded to the dtype as the `mul` and `sub` kernels store them, the row's sum in
 * f64 in column order as `reduceKernel` sums ([Note: softmax's gradient in one pass]). False
 * (nothing written) for f16 and bf16, whose ops round at every step.
 */
export function softmaxBackwardKernel(
  y: KernelTensor,
  dy: KernelTensor,
  dx: KernelTensor,
): boolean {
  if (y.dtype !== 'f32' && y.dtype !== 'f64') return false;
  const round = y.dtype === 'f32' ? Math.fround : (v: number) => v;
  const yv = readValues(y);
  const gv = readValues(dy);
  const o = outputValues(dx);
  const v = o.values;
  const cols = y.shape.length === 0 ? 1 : y.shape[y.shape.length - 1]!;
  if (cols === 0) return true;
  const rows = yv.length / cols;
  for (let r = 0; r < rows; r++) {
    const base = r * cols;
    let dot = 0;
    for (let c = 0; c < cols; c++) dot += round(gv[base + c]! * yv[base + c]!);
    dot = round(dot);
    for (let c = 0; c < cols; c++) v[base + c] = yv[base + c]! * round(gv[base + c]! - dot);
  }
  o.commit();
  return true;
}

export function layerNormKernel(
  x: KernelTensor,
  weight: KernelTensor | null,
  bias: KernelTensor | null,
  eps: number,
  out: KernelTensor,
  mean: KernelTensor,
  rstd: KernelTensor,
): void {
  const xv = readValues(x);
  const w = weight ? readValues(weight) : null;
  const bv = bias ? readValues(bias) : null;
  const o = outputValues(out);
  const m = outputValues(mean);
  const s = outputValues(rstd);
  const cols = x.shape[x.shape.length - 1]!;
  const rows = cols === 0 ? 0 : xv.length / cols;
  for (let r = 0; r < rows; r++) {
    const base = r * cols;
    let sum = 0;
    for (let c = 0; c < cols; c++) sum += xv[base + c]!;
    const mu = sum / cols;
    let sq = 0;
    for (let c = 0; c < cols; c++) {
      const d = xv[base + c]! - mu;
      sq += d * d;
    }
    const inv = 1 / Math.sqrt(sq / cols + eps);
    m.values[r] = mu;
    s.values[r] = inv;
    for (let c = 0; c < cols; c++) {
      let y = (xv[base + c]! - mu) * inv;
      if (w) y *= w[c]!;
      if (bv) y += bv[c]!;
      o.values[base + c] = y;
    }
  }
  o.commit();
  m.commit();
  s.commit();
}

export function layerNormBackwardKernel(
  dy: KernelTensor,
  x: KernelTensor,
  weight: KernelTensor | null,
  mean: KernelTensor,
  rstd: KernelTensor,
  dx: KernelTensor,
  dWeight: KernelTensor | null,
  dBias: KernelTensor | null,
): void {
  const dyv = readValues(dy);
  const xv = readValues(x);
  const w = weight ? readValues(weight) : null;
  const mv = readValues(mean);
  const sv = readValues(rstd);
  const cols = x.shape[x.shape.length - 1]!;
  const rows = cols === 0 ? 0 : xv.length / cols;
  const o = outputValues(dx);
  const dw = new Float64Array(cols);
  const db = new Float64Array(cols);
  for (let r = 0; r < rows; r++) {
    const base = r * cols;
    const mu = mv[r]!;
    const inv = sv[r]!;
    let sumG = 0;
    let sumGX = 0;
    for (let c = 0; c < cols; c++) {
      const xhat = (xv[base + c]! - mu) * inv;
      const g = dyv[base + c]! * (w ? w[c]! : 1);
      sumG += g;
      sumGX += g * xhat;
      dw[c] = dw[c]! + dyv[base + c]! * xhat;
      db[c] = db[c]! + dyv[base + c]!;
    }
    const meanG = sumG / cols;
    const meanGX = sumGX / cols;
    for (let c = 0; c < cols; c++) {
      const xhat = (xv[base + c]! - mu) * inv;
      const g = dyv[base + c]! * (w ? w[c]! : 1);
      o.values[base + c] = inv * (g - meanG - xhat * meanGX);
    }
  }
  o.commit();
  if (dWeight) {
    const out = outputValues(dWeight);
    out.values.set(dw);
    out.commit();
  }
  if (dBias) {
    const out = outputValues(dBias);
    out.values.set(db);
    out.commit();
  }
}
