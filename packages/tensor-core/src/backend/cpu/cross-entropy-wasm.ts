import type { KernelTensor, RawStorage } from '../backend.js';
import { rawView, readValues } from './cpu-storage.js';
import { checkTargets, logSumExp } from './index-kernels.js';
import type { WasmKernels } from './kernels-wasm.js';

/**
 * [Note: cross entropy through the WASM softmax]
 * GPT-2's loss is a log-softmax over 50 304 logits for each of B x T tokens: 51 M elements a step
 * at B4 T256, whose forward and backward the TypeScript kernels compute with 5 `Math.exp` each
 * (two for the log-sum-exp in each pass, one for each gradient): 8 % of a GPT-2 step on the CPU
 * backend at 0.06 GB/s, slower than any other row kernel (issue 31's step profile). Both passes go
 * through the WASM SIMD softmax instead (Cephes' expf in f32 lanes, an f64 sum: [Note: the WASM
 * SIMD kernels]):
 * - forward: the softmax of a block of rows (16 MiB of scratch from the allocator, so memory
 *   stays bounded whatever the vocabulary), then each row's loss is -log p[target]. Where
 *   p[target] is not a normal f32 (it underflowed: a logit more than ~87 below the row's largest,
 *   or the row holds an infinity or NaN), that row is computed as the TypeScript kernel does, so
 *   a confident wrong prediction gives its true loss, never Infinity.
 * - backward: the softmax written straight into dLogits, then each row scaled by its loss
 *   gradient g and g subtracted at the target (g (p - 1) there, computed before the scaling).
 * The results differ from the TypeScript kernels' f64 exp in the last bits, within the f32
 * tolerance, as the softmax does; ignored targets give 0 losses and 0 gradients as there.
 */

/** Rows of logits per forward block: 16 MiB of f32 scratch. */
const BLOCK_ELEMENTS = (16 * 2 ** 20) / 4;

/** The scratch the forward needs, from the backend's allocator. */
export interface Scratch {
  allocate(bytes: number): RawStorage;
  release(storage: RawStorage): void;
}

/** Cross entropy of f32 logits [rows, classes]; false where the WASM softmax cannot take them. */
export function crossEntropyWasm(
  kernels: WasmKernels,
  scratch: Scratch,
  logits: KernelTensor,
  targets: KernelTensor,
  losses: KernelTensor,
  ignoreIndex: number,
): boolean {
  if (logits.dtype !== 'f32' || losses.dtype !== 'f32' || logits.shape.length !== 2) return false;
  const [rows, classes] = logits.shape as [number, number];
  if (rows === 0 || classes === 0) return false;
  const t = rawView(targets) as Int32Array;
  checkTargets(t, classes, ignoreIndex);
  const blockRows = Math.max(1, Math.floor(BLOCK_ELEMENTS / classes));
  const storage = scratch.allocate(Math.min(blockRows, rows) * classes * 4);
  try {
    const out = rawView(losses) as Float32Array;
    let x: Float32Array | null = null;
    for (let from = 0; from < rows; from += blockRows) {
      const count = Math.min(blockRows, rows - from);
      const shape = [count, classes];
      const part: KernelTensor = { ...logits, shape, offset: logits.offset + from * classes };
      const p: KernelTensor = { storage, offset: 0, dtype: 'f32', shape };
      if (!kernels.softmax(part, p, false)) return false;
      const probs = rawView(p) as Float32Array;
      for (let i = 0; i < count; i++) {
        const row = from + i;
        const target = t[row]!;
        if (target === ignoreIndex) {
          out[row] = 0;
          continue;
        }
        const pt = probs[i * classes + target]!;
        if (pt >= 2 ** -126 && pt <= 1) {
          out[row] = -Math.log(pt);
        } else {
          // Underflowed, or a row with an infinity or NaN: the TypeScript kernel's arithmetic.
          x ??= rawView(logits) as Float32Array;
          out[row] = logSumExp(x, row * classes, classes) - x[row * classes + target]!;
        }
      }
    }
    return true;
  } finally {
    scratch.release(storage);
  }
}

/** The gradient of cross entropy for f32 logits [rows, classes]; false where it cannot. */
export function crossEntropyBackwardWasm(
  kernels: WasmKernels,
  logits: KernelTensor,
  targets: KernelTensor,
  dLosses: KernelTensor,
  dLogits: KernelTensor,
  ignoreIndex: number,
): boolean {
  if (logits.dtype !== 'f32' || dLogits.dtype !== 'f32' || logits.shape.length !== 2) return false;
  const [rows, classes] = logits.shape as [number, number];
  if (rows === 0 || classes === 0) return false;
  const t = rawView(targets) as Int32Array;
  checkTargets(t, classes, ignoreIndex);
  if (!kernels.softmax(logits, dLogits, false)) return false;
  const d = rawView(dLogits) as Float32Array;
  const dl = readValues(dLosses);
  for (let r = 0; r < rows; r++) {
    const base = r * classes;
    const target = t[r]!;
    if (target === ignoreIndex) {
      d.fill(0, base, base + classes);
      continue;
    }
    const g = dl[r]!;
    const atTarget = g * (d[base + target]! - 1);
    for (let c = base; c < base + classes; c++) d[c] = g * d[c]!;
    d[base + target] = atTarget;
  }
  return true;
}
