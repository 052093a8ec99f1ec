import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { isNativeWebGpuNoise, withoutNativeWebGpuNoise } from '@webshard/test-config/native-noise';
import { describe, expect, it } from 'vitest';
import { webGpuTestsEnabled } from '../../testing/backends.js';

// [Note: native WebGPU noise] in tooling/test/src/native-noise.js: test logs drop what Dawn,
// Vulkan drivers and Mesa print by themselves, and nothing else.

/** Creates a WebGPU backend and runs one op in a fresh process; resolves to its stderr. */
function stderrOfWebGpuProcess(): Promise<string> {
  const index = fileURLToPath(new URL('../../index.ts', import.meta.url));
  const script = `
    const { createWebGpuBackend, tensor, add } = await import(${JSON.stringify(index)});
    const backend = await createWebGpuBackend();
    const sum = add(tensor([1, 2], { backend }), tensor([3, 4], { backend }));
    console.log(JSON.stringify(Array.from(await sum.read())));`;
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--conditions=@webshard/source', '--import', 'tsx', '--input-type=module', '-e', script],
      { timeout: 60_000 },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`${error.message}\n${stderr}`));
        else if (stdout.trim() !== '[4,6]') reject(new Error(`unexpected output ${stdout}`));
        else resolve(stderr);
      },
    );
  });
}

describe('native WebGPU noise', () => {
  it('drops the lines Dawn, Vulkan and Mesa print, keeps everything else', () => {
    const text = [
      'Warning: maxDynamicUniformBuffersPerPipelineLayout artificially reduced from 1000000 to 16 to fit dynamic offset allocation limit.',
      'Warning: maxDynamicStorageBuffersPerPipelineLayout artificially reduced from 1000000 to 16 to fit dynamic offset allocation limit.',
      'Warning: Vulkan shaderUniformBufferArrayDynamicIndexing required.',
      '    at InitializeSupportedFeaturesImpl (/home/runner/work/node-webgpu/third_party/dawn/src/dawn/native/vulkan/PhysicalDeviceVk.cpp:1)',
      'error: XDG_RUNTIME_DIR is invalid or not set in the environment.',
      '[allReduce] rank 1: expected 1024 elements, got 1000',
      'Warning: your learning rate is large',
      '',
    ].join('\n');
    expect(withoutNativeWebGpuNoise(text)).toBe(
      '[allReduce] rank 1: expected 1024 elements, got 1000\nWarning: your learning rate is large\n',
    );
    expect(isNativeWebGpuNoise('    at main (/app/train.ts:3:1)')).toBe(false);
  });

  it.skipIf(!webGpuTestsEnabled())(
    'a process that uses WebGPU prints nothing on stderr but that noise',
    async () => {
      const stderr = await stderrOfWebGpuProcess();
      expect(withoutNativeWebGpuNoise(stderr).trim()).toBe('');
    },
  );
});
