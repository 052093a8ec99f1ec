import { loadWasmKernels, type WasmKernels } from './kernels-wasm.js';
import type { WasmMatmul } from './matmul-wasm.js';
import { loadWasmMatmul } from './matmul-wasm-load.js';

/** Options of `createCpuBackend`. */
export interface CpuBackendOptions {
  /** Emulated device memory in bytes: allocations past it throw `OutOfMemoryError`. */
  memoryLimit?: number;
  /**
   * The f32 matmul: 'auto' (the default) runs WebAssembly SIMD where the engine has it and the
   * TypeScript kernel elsewhere; 'typescript' always runs the TypeScript kernel (the reference).
   */
  matmulKernel?: 'auto' | 'typescript';
  /**
   * The other hot f32 kernels (elementwise arithmetic with the common broadcasts, GELU and its
   * gradient, where, softmax and its gradient, sums along an axis, layer norm, the fused
   * Adam/AdamW): 'auto' (the default) runs WebAssembly SIMD where the engine has it ([Note: the
   * WASM SIMD kernels]); 'typescript' always runs the TypeScript kernels (the reference).
   */
  kernels?: 'auto' | 'typescript';
  /**
   * Threads of the WASM matmul, the caller's included: `'auto'` (the default) one per core on the
   * main thread and one in worker threads; 1 never starts a worker ([Note: matmul threads]).
   * Results are identical bit for bit whatever the count.
   */
  matmulThreads?: number | 'auto';
  /**
   * Relaxed SIMD's fused multiply-add in the WASM matmul: `'off'` (the default) never, so results
   * agree bit for bit on every engine (a Chromium tab, which has relaxed SIMD, and a Node rank of
   * one job compute the same numbers); `'auto'` where the engine has it (see [Note: the WASM SIMD
   * matmul]).
   */
  matmulFma?: 'auto' | 'off';
}

/** The kernels a CPU backend runs for its options, and its description saying which. */
export function chooseCpuKernels(options: CpuBackendOptions): {
  wasmMatmul: WasmMatmul | null;
  wasmKernels: WasmKernels | null;
  description: string;
} {
  const wasmMatmul =
    options.matmulKernel === 'typescript'
      ? null
      : loadWasmMatmul(undefined, {
          threads: options.matmulThreads ?? 'auto',
          fma: options.matmulFma ?? 'off',
        });
  const wasmKernels = options.kernels === 'typescript' ? null : loadWasmKernels();
  const wasm = [
    ...(wasmMatmul === null ? [] : [`f32 matmul${wasmMatmul.fma ? ' with relaxed FMA' : ''}`]),
    ...(wasmKernels === null ? [] : ['hot f32 kernels']),
  ];
  const description =
    wasm.length === 0
      ? 'CPU (TypeScript kernels)'
      : `CPU (TypeScript kernels, WebAssembly SIMD ${wasm.join(' and ')})`;
  return { wasmMatmul, wasmKernels, description };
}
