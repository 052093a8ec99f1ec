/// <reference types="@webgpu/types" />
import { envChoice } from '../env.js';
import { NoAdapterError } from '../errors.js';
import { createCpuBackend } from '../runtime.js';
import type { Backend } from './backend.js';
import type { F16Storage } from './webgpu/webgpu-backend.js';

/** Options of `createBackend`. */
export interface CreateBackendOptions {
  /**
   * Which backend: 'webgpu', 'cpu', or 'auto' (WebGPU where an adapter exists, else the CPU).
   * Defaults to the `WEBSHARD_BACKEND` environment variable, else 'auto'.
   */
  kind?: 'auto' | 'cpu' | 'webgpu';
  /** Emulated device memory limit in bytes. */
  memoryLimit?: number;
  /** Adapter preference for WebGPU. */
  powerPreference?: GPUPowerPreference;
  /** WebGPU in Node: the adapter whose name contains this text (see `AdapterOptions.adapter`). */
  adapter?: string;
  /** WebGPU: how f16 tensors are stored (see `WebGpuBackendOptions.f16`). */
  f16?: F16Storage;
  /**
   * The CPU backend's matmul: relaxed SIMD's fused multiply-add where the engine runs it (`'auto'`)
   * or never (`'off'`, the default). See `CpuBackendOptions.matmulFma`.
   */
  matmulFma?: 'auto' | 'off';
}

type Kind = NonNullable<CreateBackendOptions['kind']>;

function chooseKind(option: CreateBackendOptions['kind']): Kind {
  const choices: Kind[] = ['auto', 'cpu', 'webgpu'];
  return envChoice('createBackend', 'WEBSHARD_BACKEND', option, choices, 'auto');
}

/**
 * Creates a backend. The `kind` option wins, else `WEBSHARD_BACKEND`, else 'auto': WebGPU where
 * an adapter exists, the CPU backend otherwise. 'webgpu' throws `NoAdapterError` when there is no
 * adapter. The `webgpu` package is only imported here, when a WebGPU backend is asked for.
 */
export async function createBackend(options: CreateBackendOptions = {}): Promise<Backend> {
  const kind = chooseKind(options.kind);
  const memoryLimit = options.memoryLimit;
  const cpuOptions = {
    ...(memoryLimit === undefined ? {} : { memoryLimit }),
    ...(options.matmulFma === undefined ? {} : { matmulFma: options.matmulFma }),
  };
  if (kind === 'cpu') return createCpuBackend(cpuOptions);
  const { createWebGpuBackend } = await import('./webgpu/webgpu-backend.js');
  const gpuOptions = {
    ...(memoryLimit === undefined ? {} : { memoryLimit }),
    ...(options.powerPreference === undefined ? {} : { powerPreference: options.powerPreference }),
    ...(options.adapter === undefined ? {} : { adapter: options.adapter }),
    ...(options.f16 === undefined ? {} : { f16: options.f16 }),
  };
  if (kind === 'webgpu') return createWebGpuBackend(gpuOptions);
  try {
    return await createWebGpuBackend(gpuOptions);
  } catch (error) {
    if (NoAdapterError.isInstance(error)) {
      return createCpuBackend(cpuOptions);
    }
    throw error;
  }
}
