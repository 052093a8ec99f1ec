import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  type AvailabilityProbe,
  webGpuLikelyAvailable,
  webGpuUnavailableReason,
} from '../backend/webgpu/gpu-runtime.js';
import { BackendError } from '../errors.js';
import { webGpuTestsEnabled } from './backends.js';

function probe(files: readonly string[], webgpu = true): AvailabilityProbe {
  return {
    existsSync: (path) => files.some((f) => f === path || f.startsWith(`${path}/`)),
    readdirSync: (dir) =>
      files.filter((f) => f.startsWith(`${dir}/`)).map((f) => f.slice(dir.length + 1)),
    webgpuResolves: () => webgpu,
  };
}

describe('WebGPU availability for tests', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.unstubAllGlobals();
  });

  it('names why WebGPU cannot run: no package, a missing ICD, no driver and no SwiftShader', () => {
    vi.stubEnv('VK_ICD_FILENAMES', undefined);
    vi.stubEnv('WEBSHARD_NO_SWIFTSHADER', undefined);
    const swiftShader = '/usr/lib/chromium/vk_swiftshader_icd.json';
    expect(webGpuUnavailableReason(probe([swiftShader]))).toBeUndefined();
    expect(webGpuUnavailableReason(probe(['/usr/share/vulkan/icd.d/nvidia.json']))).toBeUndefined();
    expect(webGpuUnavailableReason(probe([swiftShader], false))).toMatch(
      /optional dependency 'webgpu' is not installed/,
    );
    expect(webGpuUnavailableReason(probe([]))).toMatch(
      /no Vulkan driver manifest .* and no SwiftShader ICD .*apt-get install -y libvulkan1 chromium-common/,
    );
    vi.stubEnv('WEBSHARD_NO_SWIFTSHADER', '1');
    expect(webGpuUnavailableReason(probe([swiftShader]))).toMatch(/WEBSHARD_NO_SWIFTSHADER=1/);
    vi.stubEnv('VK_ICD_FILENAMES', '/nonexistent/icd.json');
    expect(webGpuUnavailableReason(probe([swiftShader]))).toBe(
      'VK_ICD_FILENAMES=/nonexistent/icd.json does not exist',
    );
    expect(webGpuUnavailableReason(undefined)).toMatch(/no synchronous access to node:fs/);
  });

  it('skips where WebGPU is unavailable, and throws the reason under WEBSHARD_REQUIRE_WEBGPU=1', () => {
    vi.stubEnv('VK_ICD_FILENAMES', '/nonexistent/icd.json');
    vi.stubEnv('WEBSHARD_REQUIRE_WEBGPU', undefined);
    expect(webGpuTestsEnabled()).toBe(false);
    vi.stubEnv('WEBSHARD_REQUIRE_WEBGPU', '1');
    expect(() => webGpuTestsEnabled()).toThrow(BackendError);
    expect(() => webGpuTestsEnabled()).toThrow(
      '[describeBackends] WEBSHARD_REQUIRE_WEBGPU=1, but WebGPU cannot run here: VK_ICD_FILENAMES=/nonexistent/icd.json does not exist',
    );
  });

  it('does not need process.getBuiltinModule (Node before 20.16)', () => {
    const expected = webGpuTestsEnabled();
    vi.stubGlobal('process', { ...process, getBuiltinModule: undefined, env: process.env });
    expect(webGpuTestsEnabled()).toBe(expected);
    // The library's own check falls back to require where one is in scope (the CJS build).
    if (typeof require === 'function') expect(webGpuLikelyAvailable()).toBe(expected);
  });
});
