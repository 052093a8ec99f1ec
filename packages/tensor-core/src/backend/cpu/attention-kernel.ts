import type { KernelTensor } from '../backend.js';
import { readValues } from './cpu-storage.js';
import { align16 } from './matmul-layout.js';
import { matmulScratchBytes } from './matmul-wasm.generated.js';
import type { WasmMatmul } from './matmul-wasm.js';

/**
 * [Note: attention's heads in one call]
 * Causal attention over the default GPT's heads (64 pairs of a batch element and a head, each
 * 32 x 16) was 1.3-1.5 ms of a layer's forward and backward on the CPU backend, against some
 * 0.3 ms of arithmetic: six strided matmuls of 64 tiny products each (each call copying qkv's
 * whole span into the matmul's memory, packing panels per product, placing C back through
 * JavaScript loops at about 1 ns an element: 23-98 us of a call), the masked softmax and its
 * gradient (each copying the scores in and out of the kernels module's memory), two zero fills
 * and an add of qkv's two gradients. Here each direction is one call of the matmul's module: qkv
 * (and, backward, the weights and dy) copied in once; per pair, every product, the scale, the
 * mask and the softmax (or its gradient) in the module's memory, the pairs split between the
 * matmul's threads in chunks as a batch of small products is (attention-chunks.ts); the outputs
 * copied out once. Backward writes q's, k's and v's gradients straight into their windows of one
 * dqkv, which the three cover.
 *
 * Same bits as the ops it replaces (`attendHeads`'s strided matmuls and `scaledMaskedSoftmax` on
 * this backend): every element of a product is summed as the gemm sums it, in order from 0 with
 * the gemm's own multiply-add, plain or fused (attention-wat.mjs's `$mm`); the softmax and its
 * gradient are the kernels module's WAT, assembled into this module too; the scale is mul_vf's
 * f32 lanes or mul_vs's f64 ones, as `binary('mul')` picks; the mask is where_rows's test. And no
 * product is -0 (a sum from +0 never is), so the old path's adds of zero-filled gradients (0 + x)
 * changed no bit that writing x does. `attention-kernel.test.ts` checks it, forward and backward,
 * plain and fused, on one thread and two.
 *
 * Taken for f32 where the backend's kernels and matmul are WASM's, T and the head size multiples
 * of 4 (no tails: the softmax's would use bytes 0..15, which are the calling thread's edge tile),
 * T at most MAX_T, a [T, T] mask, a positive scale, and operands within the module's memory
 * budget; elsewhere the kernel declines and the ops run as before. Per pair the products are
 * plain loops over 4 x 8 register tiles with no packing, so long heads read k^T and the weights
 * from the second level of cache; measured against the strided path (2 threads, forward and
 * backward a layer, `bench/attention-heads.ts long`): 0.43-0.47 of its time at T = 32, 0.64 at
 * T = 128, 0.72-0.74 at GPT-2's T = 256, 0.69 at 512 and at 1024; past that it is not measured,
 * so not taken.
 */

/** The longest sequence the kernel takes: see the note. */
export const MAX_T = 1024;

interface Dims {
  b: number;
  t: number;
  nh: number;
  hs: number;
}

/** [B, T, 3C] qkv with nh heads and a [T, T] mask, within the kernel's reach; null otherwise. */
function dimsOf(qkv: KernelTensor, mask: KernelTensor, nh: number, scale: number): Dims | null {
  if (qkv.dtype !== 'f32' || mask.dtype !== 'f32' || qkv.shape.length !== 3) return null;
  const [b, t, c3] = qkv.shape as [number, number, number];
  const hs = c3 / 3 / nh;
  if (!Number.isInteger(hs) || hs % 4 !== 0 || t % 4 !== 0 || t > MAX_T || b * t === 0) return null;
  if (mask.shape.length !== 2 || mask.shape[0] !== t || mask.shape[1] !== t) return null;
  if (!(scale > 0) || !Number.isFinite(scale)) return null;
  return { b, t, nh, hs };
}

function sameShape(x: KernelTensor, shape: readonly number[]): boolean {
  return (
    x.dtype === 'f32' && x.shape.length === shape.length && x.shape.every((d, i) => d === shape[i])
  );
}

/** Byte addresses of the call's arrays in the module's memory, from matmulScratchBytes on. */
function layout(sizes: readonly number[]): { at: number[]; end: number } {
  const at: number[] = [];
  let next = align16(matmulScratchBytes);
  for (const floats of sizes) {
    at.push(next);
    next += align16(floats * 4);
  }
  return { at, end: next };
}

/** Pairs a chunk: about four chunks a thread. */
const CHUNKS_PER_THREAD = 4;

/**
 * Copies `inputs` to their places, runs the call (direction `dir`) on the threads the pool gives
 * it, and copies `output`s back; false where the memory's budget does not hold it.
 */
function run(
  matmul: WasmMatmul,
  dir: 0 | 1,
  d: Dims,
  scale: number,
  inputs: readonly KernelTensor[],
  outputs: readonly KernelTensor[],
  workFloats: number,
): boolean {
  const { b, t, nh, hs } = d;
  const pairs = b * nh;
  // Forward: 2 products of t x t x hs a pair; backward: 4.
  const threads = matmul.attentionThreads(pairs, pairs * t * t * hs * (dir === 0 ? 2 : 4));
  const arrays = [...inputs, ...outputs].map((x) => x.shape.reduce((p, n) => p * n, 1));
  const workBytes = align16(workFloats * 4);
  const { at, end } = layout([...arrays, (threads * workBytes) / 4, 2]);
  const heap = matmul.reserve(end);
  if (heap === null) return false;
  inputs.forEach((x, i) => {
    heap.set(readValues(x) as Float32Array, at[i]! / 4);
  });
  const scaleAt = at[arrays.length + 1]!;
  new Float64Array(heap.buffer, scaleAt, 1)[0] = scale;
  // qkv, mask, att, y or dy (the forward's inputs are qkv and mask, its outputs y and att).
  const [qkv, mask] = [at[0]!, at[1]!];
  const [att, y, dqkv] = dir === 0 ? [at[3]!, at[2]!, 0] : [at[2]!, at[3]!, at[4]!];
  const per = Math.max(1, Math.floor(pairs / (threads * CHUNKS_PER_THREAD)));
  const f32Scale = Math.fround(scale) === scale ? 1 : 0;
  const work = at[arrays.length]!;
  matmul.attention(
    [dir, qkv, mask, att, y, dqkv, work, workBytes, pairs, nh, t, hs, f32Scale, per, scaleAt],
    threads,
  );
  outputs.forEach((x, i) => {
    const from = at[inputs.length + i]! / 4;
    (readValues(x) as Float32Array).set(heap.subarray(from, from + arrays[inputs.length + i]!));
  });
  return true;
}

/**
 * y [B, T, C] = the heads' attention of qkv [B, T, 3C] under `mask`, and att [B, nh, T, T] its
 * weights, in one call ([Note: attention's heads in one call]); false, nothing written, where
 * the kernel declines.
 */
export function attentionForward(
  matmul: WasmMatmul,
  qkv: KernelTensor,
  mask: KernelTensor,
  nh: number,
  scale: number,
  y: KernelTensor,
  att: KernelTensor,
): boolean {
  const d = dimsOf(qkv, mask, nh, scale);
  if (d === null) return false;
  const { b, t, hs } = d;
  if (!sameShape(y, [b, t, nh * hs]) || !sameShape(att, [b, nh, t, t])) return false;
  // k^T a thread.
  return run(matmul, 0, d, scale, [qkv, mask], [y, att], hs * t);
}

/**
 * dqkv [B, T, 3C] = the gradient of `attentionForward`'s y with respect to qkv, given dy and the
 * forward's att, in one call; false, nothing written, where the kernel declines.
 */
export function attentionBackward(
  matmul: WasmMatmul,
  qkv: KernelTensor,
  att: KernelTensor,
  dy: KernelTensor,
  mask: KernelTensor,
  nh: number,
  scale: number,
  dqkv: KernelTensor,
): boolean {
  const d = dimsOf(qkv, mask, nh, scale);
  if (d === null) return false;
  const { b, t, hs } = d;
  if (!sameShape(dy, [b, t, nh * hs]) || !sameShape(att, [b, nh, t, t])) return false;
  if (!sameShape(dqkv, qkv.shape)) return false;
  // v^T and the scores' gradient a thread.
  return run(matmul, 1, d, scale, [qkv, mask, att, dy], [dqkv], hs * t + t * t);
}
