/// <reference types="@webgpu/types" />
import { bytesPerElement, type DType, type HostArray } from '../../dtype.js';
import { f32ToBf16Bits, f32ToF16Bits } from '../../dtype-convert.js';
import { DTypeError } from '../../errors.js';
import type { KernelTensor } from '../backend.js';
import { copyLaunch, shapeSize } from './kernels.js';
import { dense, type LaunchContext } from './webgpu-dispatch.js';

/** f32 values in `dtype`'s storage format, rounded as the CPU backend's stores round them. */
export function hostArrayFromF32(values: Float32Array, dtype: DType): HostArray {
  if (dtype === 'f32') return values;
  if (dtype !== 'f16' && dtype !== 'bf16') {
    throw new DTypeError('randomNormal', [dtype], 'normal values need a float dtype');
  }
  const encode = dtype === 'f16' ? f32ToF16Bits : f32ToBf16Bits;
  return Uint16Array.from(values, encode);
}

export function plainCopy(data: HostArray): ArrayBuffer {
  // queue.writeBuffer on a SharedArrayBuffer view segfaults (ANCHORS.md): always hand it a plain
  // ArrayBuffer of our own, which also lets the write wait in the queue safely.
  const bytes = new Uint8Array(data.byteLength + ((4 - (data.byteLength % 4)) % 4));
  bytes.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  return bytes.buffer;
}

/** The body of `WebGpuBackend.write` once the tensor is checked: see there. */
export function stageWrite(
  ctx: LaunchContext,
  dst: KernelTensor,
  data: HostArray,
  done?: () => void,
): void {
  const bpe = bytesPerElement(dst.dtype);
  const size = shapeSize(dst.shape);
  if (size === 0) {
    done?.();
    return;
  }
  const buffer = dst.storage.buffer as GPUBuffer;
  const byteOffset = dst.offset * bpe;
  if (byteOffset % 4 === 0 && (size * bpe) % 4 === 0) {
    ctx.readbacks.beforeWrite(buffer);
    // Straight from the caller's memory when nothing is queued and it is not shared; when the
    // queue is busy, the caller's memory waits in the queue if the caller lends it (`done`),
    // else a copy does (see plainCopy).
    const view =
      data.buffer instanceof ArrayBuffer
        ? new Uint8Array(data.buffer, data.byteOffset, size * bpe)
        : undefined;
    if (ctx.queue.idle && view !== undefined) {
      ctx.queue.writeNow(buffer, byteOffset, view);
      done?.();
    } else if (done !== undefined && view !== undefined) {
      ctx.queue.write(buffer, byteOffset, view, done);
    } else {
      ctx.queue.write(buffer, byteOffset, plainCopy(data));
      done?.();
    }
    return;
  }
  // A packed 16-bit range that starts or ends inside a word: stage it, then copy with a kernel
  // that keeps the neighbouring halves.
  const tmp = ctx.allocate(size * bpe);
  ctx.readbacks.beforeWrite(tmp.buffer as GPUBuffer);
  ctx.queue.write(tmp.buffer as GPUBuffer, 0, plainCopy(data));
  done?.();
  ctx.run(copyLaunch({ storage: tmp, offset: 0, dtype: dst.dtype, size }, dense(dst)));
  ctx.release(tmp);
}
