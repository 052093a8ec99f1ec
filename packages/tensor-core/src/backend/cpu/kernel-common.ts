// Helpers the CPU kernel families share: broadcasting strides and the row-by-row walk.
import { shapeCount } from './cpu-storage.js';

/** Strides of `shape` right-aligned against `outShape`, 0 on broadcast (size-1 or missing) dims. */
export function broadcastStrides(shape: readonly number[], outShape: readonly number[]): number[] {
  const rank = outShape.length;
  const strides = new Array<number>(rank).fill(0);
  let stride = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    const d = shape[i]!;
    const o = rank - shape.length + i;
    strides[o] = d === 1 && outShape[o] !== 1 ? 0 : stride;
    stride *= d;
  }
  return strides;
}

/**
 * Visit `outShape` row by row (the last dim is the row), giving each operand's element offset at
 * the row start; the callback walks the row with the operands' last strides.
 */
export function forEachRow(
  outShape: readonly number[],
  strides: number[][],
  visit: (row: number, bases: number[]) => void,
): void {
  const rank = outShape.length;
  const size = shapeCount(outShape);
  if (size === 0) return;
  const cols = rank === 0 ? 1 : outShape[rank - 1]!;
  const rows = size / cols;
  const index = new Array<number>(Math.max(rank - 1, 0)).fill(0);
  const bases = strides.map(() => 0);
  for (let row = 0; row < rows; row++) {
    visit(row, bases);
    for (let d = rank - 2; d >= 0; d--) {
      index[d]!++;
      for (let s = 0; s < strides.length; s++) bases[s] = bases[s]! + strides[s]![d]!;
      if (index[d]! < outShape[d]!) break;
      for (let s = 0; s < strides.length; s++) {
        bases[s] = bases[s]! - strides[s]![d]! * outShape[d]!;
      }
      index[d] = 0;
    }
  }
}

export function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}
