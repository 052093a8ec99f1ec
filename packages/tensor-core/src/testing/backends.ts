import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Backend, BackendKind } from '../backend/backend.js';
import { nodeAvailabilityProbe, webGpuUnavailableReason } from '../backend/webgpu/gpu-runtime.js';
import { createWebGpuBackend } from '../backend/webgpu/webgpu-backend.js';
import { BackendError } from '../errors.js';
import { createCpuBackend } from '../runtime.js';

/**
 * [Note: requiring WebGPU in tests]
 * Where no adapter is likely (no `webgpu` package, no Vulkan driver, no SwiftShader), the WebGPU
 * suites are skipped, so a laptop without Vulkan still runs the CPU suites. CI must not pass by
 * skipping: with `WEBSHARD_REQUIRE_WEBGPU=1` the check throws instead, and the test file fails at
 * collection with the reason. The check imports node:fs statically (this entry is for Node test
 * runners; vitest is imported too), so it works on every Node 20, where the library's own
 * `webGpuLikelyAvailable` needs `process.getBuiltinModule` (Node >= 20.16) under ESM.
 */
export function webGpuTestsEnabled(): boolean {
  const reason = webGpuUnavailableReason(
    nodeAvailabilityProbe({ existsSync, readdirSync }, { createRequire }),
  );
  if (reason === undefined) return true;
  if (process.env.WEBSHARD_REQUIRE_WEBGPU === '1') {
    throw new BackendError(
      'describeBackends',
      `WEBSHARD_REQUIRE_WEBGPU=1, but WebGPU cannot run here: ${reason}`,
    );
  }
  return false;
}

/** How the cross-backend tests create one backend (a kind, in one configuration). */
export interface BackendFactory {
  /** The suite label: the kind, or the kind and its configuration (`webgpu-f16`). */
  readonly name: string;
  readonly kind: BackendKind;
  /**
   * Whether this machine can run it (checked synchronously when suites are declared). May throw
   * where the kind is required (see [Note: requiring WebGPU in tests]).
   */
  available(): boolean;
  /** Create the backend (once per test file; it is shared by that file's suites). */
  create(): Backend | Promise<Backend>;
}

/**
 * [Note: backend registration point]
 * The backends `describeBackends` runs every suite on, in order. The CPU backend always runs.
 * WebGPU runs twice where it can, once per f16 layout (see [Note: native f16 storage]):
 * - `webgpu`: the default adapter with f16 forced `'packed'`, the layout every adapter has;
 * - `webgpu-f16`: the same adapter with f16 `'native'`. It needs an adapter with `shader-f16`,
 *   which is not known synchronously, so it runs when `WEBSHARD_WEBGPU_F16=1` (CI sets it, after
 *   installing lavapipe, which has the feature); there, an adapter without it fails the suites.
 * `WEBSHARD_BACKENDS=cpu,webgpu` limits a run to the listed names or kinds (a kind left out is not
 * checked, so `WEBSHARD_BACKENDS=cpu` with `WEBSHARD_REQUIRE_WEBGPU=1` runs the CPU only).
 */
export const backendFactories: readonly BackendFactory[] = [
  { name: 'cpu', kind: 'cpu', available: () => true, create: () => createCpuBackend() },
  {
    name: 'webgpu',
    kind: 'webgpu',
    available: webGpuTestsEnabled,
    create: () => createWebGpuBackend({ f16: 'packed' }),
  },
  {
    name: 'webgpu-f16',
    kind: 'webgpu',
    available: () => process.env.WEBSHARD_WEBGPU_F16 === '1' && webGpuTestsEnabled(),
    create: () => createWebGpuBackend({ f16: 'native' }),
  },
];
