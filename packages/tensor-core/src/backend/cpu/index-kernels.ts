// CPU kernels that index: gather, scatter-add, cross-entropy and its backward (targets checked
// against the classes), and the finite check.
import { IndexError } from '../../errors.js';
import type { KernelTensor } from '../backend.js';
import { inoutValues, outputValues, rawView, readValues, type Values } from './cpu-storage.js';

export function gatherKernel(table: KernelTensor, indices: KernelTensor, out: KernelTensor): void {
  const [rows, dim] = table.shape as [number, number];
  const t = rawView(table);
  const ids = rawView(indices) as Int32Array;
  const o = rawView(out);
  for (let n = 0; n < ids.length; n++) {
    const id = ids[n]!;
    if (id < 0 || id >= rows) throw new IndexError('gather', id, rows, `indices[${n}]`);
    o.set(t.subarray(id * dim, id * dim + dim) as never, n * dim);
  }
}

export function scatterAddKernel(
  src: KernelTensor,
  indices: KernelTensor,
  out: KernelTensor,
): void {
  const [rows, dim] = out.shape as [number, number];
  const ids = rawView(indices) as Int32Array;
  for (let n = 0; n < ids.length; n++) {
    const id = ids[n]!;
    if (id < 0 || id >= rows) throw new IndexError('scatterAdd', id, rows, `indices[${n}]`);
  }
  const s = readValues(src);
  const o = inoutValues(out);
  // Each row an index names: its value and then every source row with that index, in index order,
  // summed in doubles and rounded once: deterministic. Only those rows are touched: a GPT-2 token
  // embedding's gradient is 38.6 M values, of which a step's 1024 tokens name at most 1024 rows
  // (a copy of the whole output in doubles made this 0.85 s of issue 31's GPT-2 step).
  const first = new Map<number, number[]>();
  for (let n = 0; n < ids.length; n++) {
    const sources = first.get(ids[n]!);
    if (sources === undefined) first.set(ids[n]!, [n]);
    else sources.push(n);
  }
  const acc = new Float64Array(dim);
  for (const [id, sources] of first) {
    const base = id * dim;
    for (let d = 0; d < dim; d++) acc[d] = o.values[base + d]!;
    for (const n of sources) {
      for (let d = 0; d < dim; d++) acc[d] = acc[d]! + s[n * dim + d]!;
    }
    for (let d = 0; d < dim; d++) o.values[base + d] = acc[d]!;
  }
  o.commit();
}

export function crossEntropyKernel(
  logits: KernelTensor,
  targets: KernelTensor,
  losses: KernelTensor,
  ignoreIndex: number,
): void {
  const [rows, classes] = logits.shape as [number, number];
  const t = rawView(targets) as Int32Array;
  checkTargets(t, classes, ignoreIndex);
  const x = readValues(logits);
  const o = outputValues(losses);
  for (let r = 0; r < rows; r++) {
    const target = t[r]!;
    if (target === ignoreIndex) {
      o.values[r] = 0;
      continue;
    }
    const base = r * classes;
    o.values[r] = logSumExp(x, base, classes) - x[base + target]!;
  }
  o.commit();
}

export function crossEntropyBackwardKernel(
  logits: KernelTensor,
  targets: KernelTensor,
  dLosses: KernelTensor,
  dLogits: KernelTensor,
  ignoreIndex: number,
): void {
  const [rows, classes] = logits.shape as [number, number];
  const t = rawView(targets) as Int32Array;
  checkTargets(t, classes, ignoreIndex);
  const x = readValues(logits);
  const dl = readValues(dLosses);
  const o = outputValues(dLogits);
  for (let r = 0; r < rows; r++) {
    const target = t[r]!;
    const base = r * classes;
    if (target === ignoreIndex) {
      o.values.fill(0, base, base + classes);
      continue;
    }
    const lse = logSumExp(x, base, classes);
    const g = dl[r]!;
    for (let c = 0; c < classes; c++) {
      o.values[base + c] = g * (Math.exp(x[base + c]! - lse) - (c === target ? 1 : 0));
    }
  }
  o.commit();
}

export function checkTargets(targets: Int32Array, classes: number, ignoreIndex: number): void {
  for (let r = 0; r < targets.length; r++) {
    const target = targets[r]!;
    if (target !== ignoreIndex && (target < 0 || target >= classes)) {
      throw new IndexError('crossEntropy', target, classes, `targets[${r}]`);
    }
  }
}

export function checkFiniteKernel(x: KernelTensor, flag: KernelTensor): void {
  const xv = readValues(x);
  for (let i = 0; i < xv.length; i++) {
    if (!Number.isFinite(xv[i]!)) {
      (rawView(flag) as Int32Array)[0] = 1;
      return;
    }
  }
}

export function logSumExp(x: Values, base: number, count: number): number {
  let max = Number.NEGATIVE_INFINITY;
  for (let c = 0; c < count; c++) max = Math.max(max, x[base + c]!);
  if (max === Number.NEGATIVE_INFINITY) return max;
  let sum = 0;
  for (let c = 0; c < count; c++) sum += Math.exp(x[base + c]! - max);
  return Math.log(sum) + max;
}
