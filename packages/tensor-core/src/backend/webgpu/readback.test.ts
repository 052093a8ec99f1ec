import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bytesPerElement, type DType } from '../../dtype.js';
import { ArgumentError, OutOfMemoryError } from '../../errors.js';
import { sizeClass } from '../../memory/caching-allocator.js';
import { createCpuBackend } from '../../runtime.js';
import { webGpuTestsEnabled } from '../../testing/backends.js';
import type { Backend, KernelTensor } from '../backend.js';
import { READ_CHUNK_BYTES, READ_CHUNKS_IN_FLIGHT } from './readback.js';
import { createWebGpuBackend, type WebGpuBackend } from './webgpu-backend.js';

// [Note: chunked reads through pooled staging]: every staging byte is counted and limited.
const enabled = webGpuTestsEnabled();
let gpu: WebGpuBackend;

beforeAll(async () => {
  if (enabled) gpu = await createWebGpuBackend();
});
afterAll(() => gpu?.dispose());

function make(backend: Backend, shape: number[], dtype: DType = 'f32', offset = 0): KernelTensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return { storage: backend.allocate((n + offset) * bytesPerElement(dtype)), offset, dtype, shape };
}

const MiB = 1 << 20;

/** Whether two arrays hold the same bytes (vitest's deep equality takes seconds at this size). */
function sameBytes(a: ArrayBufferView, b: ArrayBufferView): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(
    Buffer.from(b.buffer, b.byteOffset, b.byteLength),
  );
}

describe('Backend.read into an array of the caller (cpu)', () => {
  it('fills the array it is given and refuses one of the wrong type or size', async () => {
    const cpu = createCpuBackend();
    const t = make(cpu, [3]);
    cpu.write(t, Float32Array.of(1, 2, 3));
    const into = new Float32Array(4);
    expect(await cpu.read(t, into)).toBe(into);
    expect([...into]).toEqual([1, 2, 3, 0]);
    await expect(cpu.read(t, new Int32Array(3))).rejects.toThrow(ArgumentError);
    await expect(cpu.read(t, new Float32Array(2))).rejects.toThrow(
      '[read] into must be a Float32Array of at least 3 elements (12 bytes) for a f32 tensor of shape [3], got a Float32Array of 2 elements',
    );
    cpu.dispose();
  });
});

describe.runIf(enabled)('WebGPU reads through pooled staging', () => {
  it('counts the staging buffers of a 4 MiB read in the peak and pools them', async () => {
    const backend = await createWebGpuBackend();
    try {
      const t = make(backend, [MiB]);
      backend.write(
        t,
        Float32Array.from({ length: MiB }, (_, i) => i),
      );
      const before = backend.memoryStats();
      expect(before.allocated).toBe(4 * MiB);
      const got = await backend.read(t);
      expect(got[MiB - 1]).toBe(MiB - 1);
      const after = backend.memoryStats();
      // 4 MiB of data and the 16-byte error flag: one full staging buffer and a small one.
      const staging = READ_CHUNK_BYTES + sizeClass(16);
      expect(after.peakAllocated).toBe(4 * MiB + staging);
      expect(after.allocated).toBe(4 * MiB);
      expect(after.reserved).toBe(before.reserved + staging);
      await backend.read(t);
      expect(backend.memoryStats().reserved).toBe(after.reserved);
      expect(backend.memoryStats().poolHits).toBe(after.poolHits + 2);
      backend.emptyCache();
      expect(backend.memoryStats().reserved).toBe(4 * MiB);
    } finally {
      backend.dispose();
    }
  });

  it('refuses a read whose staging would pass the memory limit with OutOfMemoryError', async () => {
    const backend = await createWebGpuBackend();
    try {
      const t = make(backend, [MiB]);
      backend.write(t, new Float32Array(MiB).fill(3));
      backend.setMemoryLimit(6 * MiB);
      const error = await backend.read(t).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutOfMemoryError);
      expect(error).toMatchObject({ requested: READ_CHUNK_BYTES, limit: 6 * MiB });
      expect(backend.memoryStats().allocated).toBe(4 * MiB);
      backend.setMemoryLimit(4 * MiB + READ_CHUNK_BYTES + sizeClass(16));
      expect((await backend.read(t))[MiB - 1]).toBe(3);
      // A large read needs at most READ_CHUNKS_IN_FLIGHT staging buffers, whatever its size.
      backend.setMemoryLimit(undefined);
      const big = make(backend, [5 * MiB]);
      backend.resetPeakMemoryStats();
      await backend.read(big);
      expect(backend.memoryStats().peakAllocated).toBe(
        24 * MiB + READ_CHUNKS_IN_FLIGHT * READ_CHUNK_BYTES,
      );
    } finally {
      backend.dispose();
    }
  });

  it('reads every byte across pieces, at odd f16 offsets and into a given array', async () => {
    const n = 3 * MiB + 7;
    const bits = Uint16Array.from({ length: n }, (_, i) => (i * 2654435761) >>> 16);
    const t = make(gpu, [n], 'f16', 3);
    gpu.write(t, bits);
    const got = await gpu.read(t);
    expect(sameBytes(got, bits)).toBe(true);
    const into = new Uint16Array(n + 5);
    expect(await gpu.read(t, into)).toBe(into);
    expect(sameBytes(into.subarray(0, n), bits)).toBe(true);
    await expect(gpu.read(t, new Float32Array(n))).rejects.toThrow(ArgumentError);
    gpu.release(t.storage);
  });

  it('answers with the elements as they were when called, whatever is queued after', async () => {
    const n = 5 * MiB;
    const t = make(gpu, [n], 'i32');
    const values = Int32Array.from({ length: n }, (_, i) => i);
    gpu.write(t, values);
    // A kernel, a host write, and the storage freed and handed out again, each during a read.
    const first = gpu.read(t);
    gpu.fill(t, 7);
    const second = gpu.read(t);
    gpu.write(t, new Int32Array(n).fill(-1));
    const third = gpu.read(t);
    gpu.release(t.storage);
    const reused = make(gpu, [n], 'i32');
    expect(reused.storage.buffer).toBe(t.storage.buffer);
    gpu.fill(reused, 9);
    expect(sameBytes(await first, values)).toBe(true);
    expect(sameBytes(await second, new Int32Array(n).fill(7))).toBe(true);
    expect(sameBytes(await third, new Int32Array(n).fill(-1))).toBe(true);
    expect((await gpu.read(reused))[n - 1]).toBe(9);
    gpu.release(reused.storage);
  });

  it('keeps a lent host array until a queued write has run, then calls done', async () => {
    const backend = await createWebGpuBackend();
    try {
      const a = make(backend, [1024]);
      const b = make(backend, [1024]);
      // The first fill compiles its pipeline, so the write waits in the queue behind it.
      backend.fill(a, 1);
      const data = new Float32Array(1024).fill(5);
      let done = false;
      backend.write(b, data, () => {
        done = true;
      });
      expect(done).toBe(false);
      expect((await backend.read(b))[1023]).toBe(5);
      expect(done).toBe(true);
      expect((await backend.read(a))[0]).toBe(1);
    } finally {
      backend.dispose();
    }
  });
});
