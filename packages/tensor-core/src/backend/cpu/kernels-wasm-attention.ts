import type { KernelTensor } from '../backend.js';
import { broadcastKind } from './broadcast-kind.js';
import { shapeCount } from './cpu-storage.js';
import type { WasmMemory } from './wasm-memory.js';

/**
 * Attention's softmax and its gradient as chains of the WASM kernels' own exports, run in the
 * module's memory between one copy in and one copy out ([Note: attention's softmax in one call]
 * in ops/masked-softmax.ts): `mul_vf` or `mul_vs` (as `binary` picks for the number), `where_rows`
 * and `softmax` forward; `softmax_backward`, `where_rows` and the `mul` backward. Each kernel
 * runs in place on the one array, which they allow (each reads an element before it writes it).
 * So the bits are those of the separate calls, which each copied their operands in and their
 * result out. f32 only, and a mask of x's shape or repeating every `mask.size` elements, a
 * multiple of the rows' length; false (nothing written) otherwise.
 */

/** How many of x's elements the mask's values span before they repeat (n: it has x's shape). */
function maskPeriod(mask: KernelTensor, x: KernelTensor): number | null {
  if (mask.dtype !== 'f32' || x.shape.length === 0) return null;
  const kind = broadcastKind(mask.shape, x.shape);
  if (kind === null || kind.kind === 'perRow') return null;
  const period = kind.kind === 'same' ? shapeCount(x.shape) : kind.period;
  return period % x.shape[x.shape.length - 1]! === 0 ? period : null;
}

/** x *= scale in place, as `binary('mul', x, scale)` runs: f32 lanes for an f32 number. */
function scaleInPlace(memory: WasmMemory, at: number, scale: number, count: number): void {
  const f32 = Math.fround(scale) === scale || Number.isNaN(scale);
  memory.exports[f32 ? 'mul_vf' : 'mul_vs']!(at, scale, at, count);
}

/**
 * Runs `body(from, count, maskAt)` over x's n elements in pieces of whole mask periods that fit
 * what the memory keeps, with the mask (its piece, when it has x's shape) at `maskAt`.
 */
function inPieces(
  memory: WasmMemory,
  mask: KernelTensor,
  n: number,
  period: number,
  arrays: number,
  body: (from: number, count: number, maskAt: number, at: number[]) => void,
): boolean {
  const whole = period === n;
  const piece = memory.piece(n, arrays + 1, whole ? mask.shape[mask.shape.length - 1]! : period);
  for (let from = 0; from < n; from += piece) {
    const count = Math.min(piece, n - from);
    const at = memory.layout([whole ? count : period, ...new Array<number>(arrays).fill(count)]);
    if (at === null) return false;
    const [maskAt, ...rest] = at as [number, ...number[]];
    if (whole) memory.putRange(mask, maskAt, from, count);
    else memory.put(mask, maskAt);
    body(from, count, maskAt, rest);
  }
  return true;
}

/** out = softmax(maskedFill(x * scale, mask, -inf)) over the last axis. */
export function scaledMaskedSoftmaxWasm(
  memory: WasmMemory,
  x: KernelTensor,
  mask: KernelTensor,
  scale: number,
  out: KernelTensor,
): boolean {
  if (x.dtype !== 'f32' || out.dtype !== 'f32') return false;
  const n = shapeCount(x.shape);
  const period = maskPeriod(mask, x);
  if (n === 0 || period === null) return false;
  const cols = x.shape[x.shape.length - 1]!;
  return inPieces(memory, mask, n, period, 1, (from, count, maskAt, [p]) => {
    const exports = memory.exports;
    const maskCols = period === n ? count : period;
    memory.putRange(x, p!, from, count);
    scaleInPlace(memory, p!, scale, count);
    exports.where_rows!(maskAt, Number.NEGATIVE_INFINITY, p!, p!, count / maskCols, maskCols, 1);
    exports.softmax!(p!, p!, count / cols, cols);
    memory.take(out, p!, count, from);
  });
}

/** dx = where(mask, 0, softmaxBackward(y, dy)) * scale over the last axis. */
export function scaledMaskedSoftmaxBackwardWasm(
  memory: WasmMemory,
  y: KernelTensor,
  dy: KernelTensor,
  mask: KernelTensor,
  scale: number,
  dx: KernelTensor,
): boolean {
  if (y.dtype !== 'f32' || dy.dtype !== 'f32' || dx.dtype !== 'f32') return false;
  const n = shapeCount(y.shape);
  const period = maskPeriod(mask, y);
  if (n === 0 || period === null) return false;
  const cols = y.shape[y.shape.length - 1]!;
  return inPieces(memory, mask, n, period, 2, (from, count, maskAt, [py, pg]) => {
    const exports = memory.exports;
    const maskCols = period === n ? count : period;
    memory.putRange(y, py!, from, count);
    memory.putRange(dy, pg!, from, count);
    exports.softmax_backward!(py!, pg!, pg!, count / cols, cols);
    exports.where_rows!(maskAt, 0, pg!, pg!, count / maskCols, maskCols, 1);
    scaleInPlace(memory, pg!, scale, count);
    memory.take(dx, pg!, count, from);
  });
}
