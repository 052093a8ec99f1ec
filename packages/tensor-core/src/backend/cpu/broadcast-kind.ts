// Which broadcasts the WASM SIMD kernels take ([Note: the WASM SIMD kernels] in kernels-wasm.ts).
import { shapeCount } from './cpu-storage.js';

/** How an operand of `outShape` repeats: see `broadcastKind`. */
export type Broadcast =
  | { kind: 'same' }
  | { kind: 'repeat'; period: number }
  | { kind: 'perRow'; inner: number };

/**
 * How an operand of `shape` fills `outShape` (right-aligned, NumPy rules): the same shape, its
 * shape the output's trailing dims (repeats every `period` elements), or its shape the output's
 * leading dims with 1s after them (one value per `inner` elements). null for any other broadcast.
 */
export function broadcastKind(
  shape: readonly number[],
  outShape: readonly number[],
): Broadcast | null {
  const rank = outShape.length;
  if (shape.length > rank) return null;
  const dims = [...new Array<number>(rank - shape.length).fill(1), ...shape];
  if (dims.every((d, i) => d === outShape[i])) return { kind: 'same' };
  if (shapeCount(shape) === 1) return { kind: 'perRow', inner: shapeCount(outShape) };
  // Trailing match: 1s, then the output's dims.
  let s = 0;
  while (s < rank && dims[s] === 1) s++;
  if (dims.slice(s).every((d, i) => d === outShape[s + i])) {
    return { kind: 'repeat', period: shapeCount(outShape.slice(s)) };
  }
  // Leading match: the output's dims, then 1s.
  let e = rank;
  while (e > 0 && dims[e - 1] === 1) e--;
  if (dims.slice(0, e).every((d, i) => d === outShape[i])) {
    return { kind: 'perRow', inner: shapeCount(outShape.slice(e)) };
  }
  return null;
}
