import type { KernelTensor } from '../backend.js';
import { outputValues, shapeCount } from './cpu-storage.js';
import type { WasmMemory } from './wasm-memory.js';

/**
 * The WASM kernels over rows of the last axis ([Note: the WASM SIMD kernels] in kernels-wasm.ts):
 * softmax, its gradient, layer norm and its backward, each a function over the module's memory as
 * `WasmKernels` calls it. Each returns false (nothing written) where it declines, and the
 * TypeScript kernel runs.
 */

/** Softmax over the last axis (not log-softmax); false otherwise. */
export function softmaxWasm(
  memory: WasmMemory,
  x: KernelTensor,
  out: KernelTensor,
  log: boolean,
): boolean {
  if (log || x.dtype !== 'f32' || out.dtype !== 'f32' || x.shape.length === 0) return false;
  const n = shapeCount(x.shape);
  const cols = x.shape[x.shape.length - 1]!;
  // Rows are independent: in pieces of whole rows when both arrays would pass what it keeps.
  const piece = n === 0 ? n : memory.piece(n, 2, cols);
  if (piece < n) {
    for (let from = 0; from < n; from += piece) {
      const shape = [Math.min(piece, n - from) / cols, cols];
      const part = (t: KernelTensor): KernelTensor => ({ ...t, shape, offset: t.offset + from });
      if (!softmaxWasm(memory, part(x), part(out), log)) return false;
    }
    return true;
  }
  const at = n === 0 ? null : memory.layout([n, n]);
  if (at === null) return false;
  const [px, po] = at as [number, number];
  memory.put(x, px);
  memory.exports.softmax!(px, po, n / cols, cols);
  memory.take(out, po, n);
  return true;
}

/** Softmax's gradient over the last axis ([Note: softmax's gradient in one pass]); false unless f32. */
export function softmaxBackwardWasm(
  memory: WasmMemory,
  y: KernelTensor,
  dy: KernelTensor,
  dx: KernelTensor,
): boolean {
  if (y.dtype !== 'f32' || dy.dtype !== 'f32' || dx.dtype !== 'f32' || y.shape.length === 0)
    return false;
  const n = shapeCount(y.shape);
  const cols = y.shape[y.shape.length - 1]!;
  if (n === 0) return false;
  // Rows are independent: in pieces of whole rows, as the softmax.
  const piece = memory.piece(n, 3, cols);
  if (piece < n) {
    for (let from = 0; from < n; from += piece) {
      const shape = [Math.min(piece, n - from) / cols, cols];
      const part = (t: KernelTensor): KernelTensor => ({ ...t, shape, offset: t.offset + from });
      if (!softmaxBackwardWasm(memory, part(y), part(dy), part(dx))) return false;
    }
    return true;
  }
  const at = memory.layout([n, n, n]);
  if (at === null) return false;
  const [py, pg, po] = at as [number, number, number];
  memory.put(y, py);
  memory.put(dy, pg);
  memory.exports.softmax_backward!(py, pg, po, n / cols, cols);
  memory.take(dx, po, n);
  return true;
}

/** Layer norm over the last axis with its per-row mean and rstd; false unless all are f32. */
export function layerNormWasm(
  memory: WasmMemory,
  x: KernelTensor,
  weight: KernelTensor | null,
  bias: KernelTensor | null,
  eps: number,
  out: KernelTensor,
  mean: KernelTensor,
  rstd: KernelTensor,
): boolean {
  if (![x, weight, bias, out, mean, rstd].every((t) => t === null || t.dtype === 'f32')) {
    return false;
  }
  const cols = x.shape[x.shape.length - 1] ?? 0;
  const n = shapeCount(x.shape);
  if (cols === 0 || n === 0) return false;
  const rows = n / cols;
  const at = memory.layout([n, cols, cols, n, rows, rows]);
  if (at === null) return false;
  const [px, pw, pb, po, pm, ps] = at as [number, number, number, number, number, number];
  memory.put(x, px);
  if (weight) memory.put(weight, pw);
  if (bias) memory.put(bias, pb);
  const flags = (weight ? 1 : 0) | (bias ? 2 : 0);
  memory.exports.layer_norm!(px, pw, pb, po, pm, ps, rows, cols, eps, flags);
  memory.take(out, po, n);
  memory.take(mean, pm, rows);
  memory.take(rstd, ps, rows);
  return true;
}

/** Layer norm's backward; false unless all are f32. */
export function layerNormBackwardWasm(
  memory: WasmMemory,
  dy: KernelTensor,
  x: KernelTensor,
  weight: KernelTensor | null,
  mean: KernelTensor,
  rstd: KernelTensor,
  dx: KernelTensor,
  dWeight: KernelTensor | null,
  dBias: KernelTensor | null,
): boolean {
  const all = [dy, x, weight, mean, rstd, dx, dWeight, dBias];
  if (!all.every((t) => t === null || t.dtype === 'f32')) return false;
  const cols = x.shape[x.shape.length - 1] ?? 0;
  const n = shapeCount(x.shape);
  if (cols === 0 || n === 0) return false;
  const rows = n / cols;
  // dw and db are f64 arrays of cols + 1: twice the floats.
  const at = memory.layout([n, n, cols, rows, rows, n, 2 * cols + 2, 2 * cols + 2]);
  if (at === null) return false;
  const [pdy, px, pw, pm, ps, pdx, pdw, pdb] = at as number[] as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  memory.put(dy, pdy);
  memory.put(x, px);
  if (weight) memory.put(weight, pw);
  memory.put(mean, pm);
  memory.put(rstd, ps);
  memory.exports.layer_norm_backward!(
    pdy,
    px,
    pw,
    pm,
    ps,
    pdx,
    pdw,
    pdb,
    rows,
    cols,
    weight ? 1 : 0,
  );
  memory.take(dx, pdx, n);
  const buffer = memory.exports.memory.buffer;
  // The f64 sums, rounded once on store as the TypeScript kernel stores them.
  if (dWeight) outputValues(dWeight).values.set(new Float64Array(buffer, pdw, cols));
  if (dBias) outputValues(dBias).values.set(new Float64Array(buffer, pdb, cols));
  return true;
}
