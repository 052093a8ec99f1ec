import { afterAll, beforeAll } from 'vitest';
import { createWebGpuBackend, type WebGpuBackend } from '../backend/webgpu/webgpu-backend.js';
import { webGpuTestsEnabled } from './backends.js';

/**
 * One WebGPU backend (the default adapter and options) for a test file's suites: created before
 * them where WebGPU can run here (`webGpuTestsEnabled`, [Note: requiring WebGPU in tests]) and
 * disposed after. `enabled` is what `describe.runIf` takes; `backend()` is the backend, inside a
 * test. Call it once, at the top of the file.
 */
export function webGpuFileBackend(): { readonly enabled: boolean; backend(): WebGpuBackend } {
  const enabled = webGpuTestsEnabled();
  let gpu: WebGpuBackend | undefined;
  beforeAll(async () => {
    if (enabled) gpu = await createWebGpuBackend();
  });
  afterAll(() => {
    gpu?.dispose();
  });
  return {
    enabled,
    backend() {
      if (gpu === undefined) throw new Error('the WebGPU backend exists only inside its tests');
      return gpu;
    },
  };
}
