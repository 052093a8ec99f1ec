import type { KernelTensor } from '../backend.js';
import { readValues, shapeCount } from './cpu-storage.js';
import { matmulScratchBytes } from './matmul-wasm.generated.js';
import type { WasmMatmul } from './matmul-wasm.js';

/**
 * [Note: GELU on the matmul's threads]
 * GELU and its gradient are the step's costliest element-wise maps on the CPU backend: per
 * element an erf (a rational of degree 13 over 8, with a divide) and, for the gradient, an exp
 * too, in f32 lanes ([Note: the WASM SIMD kernels]). In the default GPT's step they were some
 * 10 % of the samples (131 072 elements a call: GELU 0.3-0.4 ms, its gradient 0.6-0.8 ms on one
 * thread of issue 49's VM), computed on the calling thread while the matmul's workers waited for
 * the next product. The matmul's module carries the same two maps (the kernels module's WAT,
 * kernels-wat-gelu.mjs, assembled into both), so a large map runs as the matmul's calls do
 * ([Note: matmul threads]): its operands are copied into the matmul's shared memory, the calling
 * thread publishes a map call, and every thread claims chunks of elements (a multiple of 4, about
 * four a thread) until none is left. Each element is computed alone by the same instructions in
 * either module, so the bits are those of the one-thread kernel whoever computes which chunk;
 * only the last chunk has a tail, which goes through the scratch bytes 0..31 as in the kernels
 * module (there the calling thread's edge tile, which no map call uses).
 *
 * Taken where the kernels are WASM's (`kernels: 'auto'`), x, dy and the output are f32 of one
 * shape, the map has MAP_MIN_ELEMENTS or more (a meeting of the threads costs 1-70 us) and the
 * workers run; otherwise the kernels module's one-thread map, or the TypeScript kernel, runs.
 * Copies into the shared memory cost about 1.6x those into the kernels module's own (27-43
 * against 17 us for 512 KiB here), which the split repays many times over.
 */

/** Elements a piece of a map call at most: three arrays of 16 MiB stay within the budget. */
const PIECE = 2 ** 22;
const CHUNKS_PER_THREAD = 4;
/** Elements a chunk at least, so that a chunk is worth claiming. */
const MIN_CHUNK = 4096;

/**
 * out = gelu(x), or dy gelu'(x) where `dy` is not null, on the matmul's threads ([Note: GELU on
 * the matmul's threads]); false, nothing written, where that does not apply.
 */
export function geluOnThreads(
  matmul: WasmMatmul,
  x: KernelTensor,
  dy: KernelTensor | null,
  out: KernelTensor,
): boolean {
  if (x.dtype !== 'f32' || out.dtype !== 'f32' || (dy !== null && dy.dtype !== 'f32')) return false;
  if (!sameShape(x.shape, out.shape) || (dy !== null && !sameShape(dy.shape, out.shape)))
    return false;
  const n = shapeCount(out.shape);
  const threads = matmul.mapThreads(n);
  if (threads < 2) return false;
  const piece = Math.min(n, PIECE);
  const arrays = dy === null ? 2 : 3;
  // Each array 16-byte aligned: unaligned vector loads cost some 1.5x the whole map here.
  const stride = Math.ceil(piece / 4) * 16;
  const heap = matmul.reserve(matmulScratchBytes + arrays * stride);
  if (heap === null) return false;
  const xs = readValues(x) as Float32Array;
  const dys = dy === null ? null : (readValues(dy) as Float32Array);
  const outs = readValues(out) as Float32Array;
  const xAt = matmulScratchBytes;
  const dyAt = dys === null ? null : xAt + stride;
  const oAt = xAt + (arrays - 1) * stride;
  for (let from = 0; from < n; from += piece) {
    const count = Math.min(piece, n - from);
    heap.set(xs.subarray(from, from + count), xAt / 4);
    if (dys !== null && dyAt !== null) heap.set(dys.subarray(from, from + count), dyAt / 4);
    const chunk = Math.max(MIN_CHUNK, Math.ceil(count / (threads * CHUNKS_PER_THREAD) / 4) * 4);
    matmul.map(xAt, dyAt, oAt, count, chunk);
    outs.set(heap.subarray(oAt / 4, oAt / 4 + count), from);
  }
  return true;
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}
