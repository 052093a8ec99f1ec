import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import * as suites from '@webshard/test-config/native-noise';
import { describe, expect, it } from 'vitest';
import {
  copyWithoutNativeNoise,
  isNativeWebGpuNoise,
  NATIVE_WEBGPU_NOISE,
} from './native-noise.js';

// [Note: quiet native stderr in the CLIs]: the CLIs drop Dawn's, Vulkan's and Mesa's own lines.

const NOISE = [
  'Warning: maxDynamicUniformBuffersPerPipelineLayout artificially reduced from 1000000 to 16 to fit dynamic offset allocation limit.',
  'Warning: Vulkan shaderUniformBufferArrayDynamicIndexing required.',
  '    at InitializeSupportedFeaturesImpl (/home/runner/work/node-webgpu/third_party/dawn/src/dawn/native/vulkan/PhysicalDeviceVk.cpp:1)',
  '',
  'error: XDG_RUNTIME_DIR is invalid or not set in the environment.',
];
const KEPT = [
  '[allReduce] rank 1: expected 1024 elements, got 1000',
  'Warning: your learning rate is large',
  '    at main (/app/train.ts:3:1)',
  '',
  'webshard-train: --lr 0 is out of range (0, 10]',
];

/** What `copyWithoutNativeNoise` writes for `text` fed in pieces of `piece` characters. */
async function copied(text: string, piece: number): Promise<string> {
  const from = new PassThrough();
  const to = new PassThrough();
  let out = '';
  to.on('data', (chunk: Buffer) => {
    out += chunk;
  });
  const done = copyWithoutNativeNoise(from, to);
  for (let at = 0; at < text.length; at += piece) from.write(text.slice(at, at + piece));
  from.end();
  await done;
  return out;
}

describe('copyWithoutNativeNoise', () => {
  it('drops exactly the noise lines, however the stream is cut', async () => {
    const text = [KEPT[0], ...NOISE, ...KEPT.slice(1), ''].join('\n');
    const expected = `${KEPT.join('\n')}\n`;
    for (const piece of [1, 3, 17, 64, text.length])
      expect(await copied(text, piece)).toBe(expected);
  });

  it('writes a last line without its newline (a prompt) after a short wait, unless it is noise', async () => {
    const from = new PassThrough();
    const to = new PassThrough();
    let out = '';
    to.on('data', (chunk: Buffer) => {
      out += chunk;
    });
    const done = copyWithoutNativeNoise(from, to);
    from.write('epoch 1 ');
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(out).toBe('epoch 1 ');
    from.end('error: XDG_RUNTIME_DIR is invalid or not set in the environment.');
    await done;
    expect(out).toBe('epoch 1 ');
  });

  it('knows the same lines as the test suites filter (tooling/test/src/native-noise.js)', () => {
    expect(NATIVE_WEBGPU_NOISE.map(String)).toEqual(suites.NATIVE_WEBGPU_NOISE.map(String));
    for (const line of [...NOISE, ...KEPT]) {
      expect(isNativeWebGpuNoise(line), line).toBe(suites.isNativeWebGpuNoise(line));
    }
  });
});

/** True while process `pid` exists. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('runWithNativeNoiseFiltered', () => {
  it('takes the filtered child down when the CLI is killed with SIGKILL', async () => {
    const fixture = join(
      dirname(fileURLToPath(import.meta.url)),
      '__fixtures__',
      'filtered-sleeper.ts',
    );
    const env = { ...process.env };
    delete env.WEBSHARD_STDERR_FILTERED;
    delete env.WEBSHARD_DAWN_LOGS;
    const cli = spawn(
      process.execPath,
      ['--conditions=@webshard/source', '--import', 'tsx', fixture],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
        env,
      },
    );
    const pid = await new Promise<number>((resolve) => {
      let out = '';
      cli.stdout!.on('data', (chunk: Buffer) => {
        out += chunk;
        const match = /child (\d+)/.exec(out);
        if (match) resolve(Number(match[1]));
      });
    });
    expect(pid).not.toBe(cli.pid);
    expect(alive(pid)).toBe(true);
    cli.kill('SIGKILL');
    const deadline = Date.now() + 5000;
    while (alive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const survived = alive(pid);
    if (survived) process.kill(pid, 'SIGKILL');
    expect(survived).toBe(false);
  }, 30_000);
});
