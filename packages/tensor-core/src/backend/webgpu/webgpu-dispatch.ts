/// <reference types="@webgpu/types" />
import { bytesPerElement } from '../../dtype.js';
import { DTypeError } from '../../errors.js';
import type { AdamHyper, KernelTensor, RawStorage } from '../backend.js';
import type { DeviceQueue } from './device-queue.js';
import { type BroadcastOperand, copyLaunch, type Dense, shapeSize } from './kernels.js';
import { type MatmulTuning, matmulLaunch } from './matmul.js';
import type { AdamScalars } from './optimizer-kernels.js';
import type { Launch } from './program.js';
import type { Readbacks } from './readback.js';

/** What `dispatch` and `stageWrite` need of the backend. */
export interface LaunchContext {
  readonly queue: DeviceQueue;
  /** Reads in flight: see [Note: chunked reads through pooled staging]. */
  readonly readbacks: Readbacks;
  allocate(bytes: number): RawStorage;
  release(storage: RawStorage): void;
  /** The backend's `run`: checks the launch, then `dispatch`es it. */
  run(launch: Launch): void;
}

export function dense(t: KernelTensor): Dense {
  return { storage: t.storage, offset: t.offset, dtype: t.dtype, size: shapeSize(t.shape) };
}

export function denseShaped(t: KernelTensor): Dense & { shape: readonly number[] } {
  return { ...dense(t), shape: t.shape };
}

export function operand(v: KernelTensor | number): BroadcastOperand {
  return typeof v === 'number' ? v : denseShaped(v);
}

/** The fused optimizer kernels read and write their state as f32 words. */
export function requireF32State(op: string, state: readonly KernelTensor[]): void {
  const other = state.find((t) => t.dtype !== 'f32');
  if (other) {
    throw new DTypeError(
      op,
      [other.dtype],
      'the WebGPU optimizer kernels update f32 parameters and state (keep an f32 master copy)',
    );
  }
}

/**
 * Enqueue a launch. WebGPU forbids a buffer bound as writable storage from being bound again in
 * the same dispatch, as read-only storage or as another writable binding (Dawn rejects aliasing
 * writable bindings whose ranges overlap, and a binding here is the whole buffer). Views of one
 * flat buffer (FSDP's flat parameters, an optimizer's state) would hit both, so: a read-only
 * operand in a buffer the launch also writes is copied to a temporary first; a second writable
 * operand in one buffer runs on a temporary copy of its range, copied back into its view after
 * the kernel by an element-wise copy (which keeps neighbouring 16-bit halves). The caller (the
 * backend's `run`) has checked the backend is live and the operands' dtypes.
 */
export function dispatch(ctx: LaunchContext, launch: Launch): void {
  if (launch.shape.some((d) => d === 0)) return;
  const writable = new Set(launch.bindings.filter((b) => b.writable).map((b) => b.storage.buffer));
  for (const buffer of writable) ctx.readbacks.beforeWrite(buffer as GPUBuffer);
  const boundWritable = new Set<unknown>();
  const temps: RawStorage[] = [];
  const copyBacks: Launch[] = [];
  const bindings = launch.bindings.map((b) => {
    if (b.writable && !boundWritable.has(b.storage.buffer)) {
      boundWritable.add(b.storage.buffer);
      return b;
    }
    if (!b.writable && !writable.has(b.storage.buffer)) return b;
    // Same byte positions in the temporary, so the operand's offset (in the params) still holds.
    const bpe = bytesPerElement(b.dtype);
    const start = Math.floor((b.offset * bpe) / 4) * 4;
    const end = Math.ceil(((b.offset + b.extent) * bpe) / 4) * 4;
    const tmp = ctx.allocate(end);
    temps.push(tmp);
    ctx.readbacks.beforeWrite(tmp.buffer as GPUBuffer);
    ctx.queue.copy(
      b.storage.buffer as GPUBuffer,
      start,
      tmp.buffer as GPUBuffer,
      start,
      end - start,
    );
    if (b.writable) {
      const view = { offset: b.offset, dtype: b.dtype, size: b.extent };
      copyBacks.push(copyLaunch({ ...view, storage: tmp }, { ...view, storage: b.storage }));
    }
    return { ...b, storage: tmp };
  });
  const buffers = bindings.map((b) => b.storage.buffer as GPUBuffer);
  ctx.queue.launch(launch, buffers);
  for (const c of copyBacks) ctx.run(c);
  for (const t of temps) ctx.release(t);
}

/** `Backend.matmul` on this backend: 16-bit outputs go through an f32 temporary. */
export function runMatmul(
  ctx: LaunchContext,
  tuning: MatmulTuning,
  a: KernelTensor,
  b: KernelTensor,
  out: KernelTensor,
  transposeA: boolean,
  transposeB: boolean,
): void {
  const [aBatch = 1, a1 = 1, a2 = 1] = a.shape;
  const [bBatch = 1, b1 = 1, b2 = 1] = b.shape;
  const m = transposeA ? a2 : a1;
  const k = transposeA ? a1 : a2;
  const n = transposeB ? b1 : b2;
  const batch = out.shape[0] ?? 1;
  const shape = { batch, m, n, k, aBatch, bBatch };
  const o = dense(out);
  if (o.dtype === 'f32') {
    ctx.run(matmulLaunch(tuning, dense(a), dense(b), o, transposeA, transposeB, shape));
    return;
  }
  // 16-bit outputs: accumulate into f32, then round once (an element-wise cast owns whole words).
  const tmp = ctx.allocate(o.size * 4);
  const f32: Dense = { storage: tmp, offset: 0, dtype: 'f32', size: o.size };
  ctx.run(matmulLaunch(tuning, dense(a), dense(b), f32, transposeA, transposeB, shape));
  ctx.run(copyLaunch(f32, o));
  ctx.release(tmp);
}

/** The Adam kernel's scalars for step `h.step`. */
export function adamScalars(h: AdamHyper): AdamScalars {
  return {
    lr: h.lr,
    beta1: h.beta1,
    beta2: h.beta2,
    eps: h.eps,
    weightDecay: h.weightDecay,
    decoupled: h.decoupled,
    gradScale: h.gradScale,
    biasCorrection1: 1 - h.beta1 ** h.step,
    biasCorrection2Sqrt: Math.sqrt(1 - h.beta2 ** h.step),
  };
}
