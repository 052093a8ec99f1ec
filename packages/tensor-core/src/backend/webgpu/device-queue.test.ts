/// <reference types="@webgpu/types" />
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { webGpuTestsEnabled } from '../../testing/backends.js';
import { DeviceQueue } from './device-queue.js';
import { BufferUsage, MapMode } from './gpu-runtime.js';
import { fillLaunch } from './kernels.js';
import { createWebGpuBackend, type WebGpuBackend } from './webgpu-backend.js';

const enabled = webGpuTestsEnabled();
let backend: WebGpuBackend;

beforeAll(async () => {
  if (enabled) backend = await createWebGpuBackend();
});
afterAll(() => backend?.dispose());

interface Gate {
  open(): void;
  /** Resolves once the pipeline behind the gate has compiled. */
  readonly compiled: Promise<void>;
}

/**
 * The backend's device, except that `createComputePipelineAsync` for the shader modules labelled
 * with a gated key waits until the test opens the gate: a deterministic "pipeline still compiling".
 */
function gatedDevice(device: GPUDevice, keys: readonly string[]): [GPUDevice, Map<string, Gate>] {
  const gates = new Map<string, Gate>();
  const waits = new Map<string, Promise<void>>();
  const compiled = new Map<string, () => void>();
  for (const key of keys) {
    let open!: () => void;
    waits.set(key, new Promise<void>((resolve) => (open = resolve)));
    let done!: () => void;
    const promise = new Promise<void>((resolve) => (done = resolve));
    compiled.set(key, done);
    gates.set(key, { open, compiled: promise });
  }
  const proxy = new Proxy(device, {
    get(target, prop) {
      if (prop === 'createComputePipelineAsync') {
        return async (descriptor: GPUComputePipelineDescriptor) => {
          const key = descriptor.compute.module.label;
          await waits.get(key);
          const pipeline = await target.createComputePipelineAsync(descriptor);
          // After the queue's own continuation (registered first) has run.
          setTimeout(() => compiled.get(key)?.(), 0);
          return pipeline;
        };
      }
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return [proxy, gates];
}

function storageBuffer(device: GPUDevice, bytes: number): GPUBuffer {
  return device.createBuffer({
    size: bytes,
    usage: BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST,
  });
}

async function readBack(queue: DeviceQueue, src: GPUBuffer, bytes: number): Promise<ArrayBuffer> {
  const staging = queue.device.createBuffer({
    size: bytes,
    usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST,
  });
  queue.copy(src, 0, staging, 0, bytes);
  await queue.flush();
  await staging.mapAsync(MapMode.READ);
  const out = staging.getMappedRange().slice(0);
  staging.unmap();
  staging.destroy();
  return out;
}

describe.runIf(enabled)('DeviceQueue', () => {
  it('keeps the params of a dispatch waiting for its pipeline when an earlier submit frees the rest', async () => {
    const a = storageBuffer(backend.device, 16);
    const b = storageBuffer(backend.device, 16);
    const c = storageBuffer(backend.device, 16);
    const dense = (buffer: GPUBuffer, dtype: 'f32' | 'i32') => ({
      storage: { buffer, byteSize: 16 },
      offset: 0,
      dtype,
      size: 4,
    });
    const f32Fill = fillLaunch(dense(a, 'f32'), 1);
    const i32Fill = fillLaunch(dense(b, 'i32'), 2);
    const [device, gates] = gatedDevice(backend.device, [f32Fill.program.key, i32Fill.program.key]);
    const queue = new DeviceQueue(device);

    queue.launch(f32Fill, [a]); // waits for the f32 fill pipeline
    queue.write(c, 0, new Float32Array([5, 5, 5, 5]).buffer); // a host write: submits once reached
    queue.launch(i32Fill, [b]); // waits for the i32 fill pipeline
    gates.get(f32Fill.program.key)!.open();
    await gates.get(f32Fill.program.key)!.compiled;
    // The f32 fill and the write are submitted; the i32 fill still waits. A new launch takes a
    // params buffer from the pool and writes it at once: it must not be the waiting fill's.
    queue.launch(fillLaunch(dense(c, 'f32'), 7), [c]);
    gates.get(i32Fill.program.key)!.open();

    expect([...new Float32Array(await readBack(queue, a, 16))]).toEqual([1, 1, 1, 1]);
    expect([...new Int32Array(await readBack(queue, b, 16))]).toEqual([2, 2, 2, 2]);
    expect([...new Float32Array(await readBack(queue, c, 16))]).toEqual([7, 7, 7, 7]);
    for (const buffer of [a, b, c]) buffer.destroy();
  });
});
