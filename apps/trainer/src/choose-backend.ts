import { type Backend, createBackend } from '@webshard/tensor-core';
import type { TrainConfig } from './cli/options.js';

/** Adapters that are software rasterizers on the CPU (the WebGPU backend's own test, by name). */
const SOFTWARE_ADAPTER = /swiftshader|llvmpipe|lavapipe|warp|software/i;

/**
 * [Note: the trainer's default backend]
 * `auto` means WebGPU on a real GPU and the CPU backend otherwise. An adapter that is a software
 * rasterizer (SwiftShader, which Dawn finds on a machine without a GPU) counts as no GPU: on the
 * 2-core reference machine the CPU backend (its matmul in WASM SIMD) trains the default model (2
 * layers, 64 wide, 512 tokens a step) 2.14x as fast as WebGPU on SwiftShader (132 against 282 ms a
 * step) and 1.38x as fast as on lavapipe (123 against 169 ms; `bench/backends.ts` measures both in
 * one run, 2026-11-23), and the two give the same losses. `--backend webgpu` forces WebGPU. A browser rank chooses by the same rule
 * (ranks/browser-page.ts), so its numbers are those of the Node ranks beside it.
 */
export async function chooseBackend(
  config: TrainConfig,
  say: (text: string) => void,
): Promise<Backend> {
  const memory = config.memoryLimit === null ? {} : { memoryLimit: config.memoryLimit };
  const backend = await createBackend({ kind: config.backend, ...memory });
  if (
    config.backend === 'auto' &&
    backend.kind === 'webgpu' &&
    SOFTWARE_ADAPTER.test(backend.description)
  ) {
    say(
      `the WebGPU adapter is a software one (${backend.description}): the CPU backend is faster for this model, using it (--backend webgpu to override)\n`,
    );
    backend.dispose();
    return createBackend({ kind: 'cpu', ...memory });
  }
  return backend;
}
