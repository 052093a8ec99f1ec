import type { Backend, BackendKind } from '../backend/backend.js';
import { createWebGpuBackend } from '../backend/webgpu/webgpu-backend.js';
import { webGpuLikelyAvailable } from '../backend/webgpu/gpu-runtime.js';
import { createCpuBackend } from '../runtime.js';

/** How the cross-backend tests create one backend kind. */
export interface BackendFactory {
  readonly kind: BackendKind;
  /** Whether this machine can run it (checked once, synchronously, when suites are declared). */
  available(): boolean;
  /** Create the backend (once per test file; it is shared by that file's suites). */
  create(): Backend | Promise<Backend>;
}

/**
 * [Note: backend registration point]
 * The backends `describeBackends` runs every suite on, in order. The CPU backend always runs.
 * The WebGPU backend adds its entry here (and nowhere else): `{ kind: 'webgpu', available, create }`.
 * `WEBSHARD_BACKENDS=cpu,webgpu` limits a run to the listed kinds.
 */
export const backendFactories: readonly BackendFactory[] = [
  { kind: 'cpu', available: () => true, create: () => createCpuBackend() },
  { kind: 'webgpu', available: webGpuLikelyAvailable, create: () => createWebGpuBackend() },
];
