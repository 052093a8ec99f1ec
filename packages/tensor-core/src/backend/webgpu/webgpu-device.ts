/// <reference types="@webgpu/types" />
import { envChoice } from '../../env.js';
import { BackendError, OutOfMemoryError } from '../../errors.js';
import { CachingAllocator } from '../../memory/caching-allocator.js';
import {
  type AdapterOptions,
  acquireAdapter,
  BufferUsage,
  describeAdapter,
} from './gpu-runtime.js';
import type { MatmulKernel, MatmulTuning } from './matmul.js';
import { READ_STAGING } from './readback.js';

/** Options of `createWebGpuBackend`. */
export interface WebGpuBackendOptions extends AdapterOptions {
  /** Emulated device memory limit in bytes (see `Backend.setMemoryLimit`). */
  memoryLimit?: number;
  /** Force a matmul kernel instead of choosing per adapter. */
  matmulKernel?: MatmulKernel;
  /** Force a full matmul tuning (benchmarks of the tuning table). */
  matmulTuning?: MatmulTuning;
  /**
   * How f16 tensors are stored (see [Note: native f16 storage]): `'native'` (`array<f16>`; throws
   * a `BackendError` where the adapter lacks `shader-f16`), `'packed'` (two per u32 word, on every
   * adapter), or `'auto'`: native on GPUs that have the feature, packed on CPU adapters (see
   * `f16Layout`). Default: the environment variable `WEBSHARD_F16`, else `'auto'`. Results are
   * bit-identical either way.
   */
  f16?: F16Storage;
}

/** The `f16` option of `createWebGpuBackend`. */
export type F16Storage = 'auto' | 'native' | 'packed';

/**
 * The f16 layout a backend uses: `'native'` needs `shader-f16` (callers check first); `'auto'` is
 * native on GPUs with the feature and packed on CPU adapters, where packed measured faster
 * (lavapipe: an f16 add 1.9x, a transpose 1.35-1.7x; the bench's "native storage" rows): they run a
 * workgroup as SIMD lanes of a CPU core, and packed storage does two elements per invocation.
 */
export function f16Layout(
  option: F16Storage,
  hasShaderF16: boolean,
  cpuAdapter: boolean,
): 'native' | 'packed' {
  if (option === 'packed' || !hasShaderF16) return 'packed';
  if (option === 'native') return 'native';
  return cpuAdapter ? 'packed' : 'native';
}

export function chooseF16(option: F16Storage | undefined): F16Storage {
  const choices: F16Storage[] = ['auto', 'native', 'packed'];
  return envChoice('createWebGpuBackend', 'WEBSHARD_F16', option, choices, 'auto');
}

const USAGE = () => BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;

/**
 * The device's buffers: storage buffers up to `maxBytes` (the device's largest buffer and binding),
 * read staging buffers for READ_STAGING; `destroy` frees one the allocator drops.
 */
export function deviceAllocator(
  device: GPUDevice,
  maxBytes: number,
  destroy: (buffer: GPUBuffer) => void,
): CachingAllocator<GPUBuffer> {
  const allocator: CachingAllocator<GPUBuffer> = new CachingAllocator<GPUBuffer>(
    {
      create: (size, usage) => {
        if (size > maxBytes) {
          throw new OutOfMemoryError(size, allocator.stats().allocated, maxBytes, 'webgpu');
        }
        return device.createBuffer({
          size,
          usage: usage === READ_STAGING ? BufferUsage.MAP_READ | BufferUsage.COPY_DST : USAGE(),
        });
      },
      destroy,
    },
    'webgpu',
  );
  return allocator;
}

/**
 * Finds an adapter and requests a device with the adapter's largest buffer limits, and
 * `shader-f16` and `subgroups` where offered (see `createWebGpuBackend`); returns them with the
 * resolved `f16` option.
 */
export async function openWebGpuDevice(options: WebGpuBackendOptions): Promise<{
  gpu: GPU;
  adapter: GPUAdapter;
  device: GPUDevice;
  f16: F16Storage;
}> {
  const f16 = chooseF16(options.f16);
  const { gpu, adapter } = await acquireAdapter(options);
  if (f16 === 'native' && !adapter.features.has('shader-f16')) {
    throw new BackendError(
      'createWebGpuBackend',
      `f16: 'native' needs the shader-f16 feature, which this adapter lacks (${describeAdapter(adapter)}); use 'auto' or 'packed'`,
    );
  }
  // Subgroups: the CPU adapters' matmul shares A's loads across one ([Note: A's rows shared
  // across a subgroup]).
  const requiredFeatures = (['shader-f16', 'subgroups'] as GPUFeatureName[]).filter((f) =>
    adapter.features.has(f),
  );
  const device = await adapter.requestDevice({
    requiredFeatures,
    requiredLimits: {
      maxBufferSize: adapter.limits.maxBufferSize,
      maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
      maxStorageBuffersPerShaderStage: adapter.limits.maxStorageBuffersPerShaderStage,
      maxComputeWorkgroupStorageSize: adapter.limits.maxComputeWorkgroupStorageSize,
    },
  });
  return { gpu, adapter, device, f16 };
}
