/// <reference types="@webgpu/types" />
import { describe, expect, it } from 'vitest';
import { NoAdapterError } from '../../errors.js';
import { acquireBrowserAdapter } from './browser-adapter.js';

/** A fake `navigator.gpu` whose `requestAdapter` answers `answer` (or throws it). */
function fakeGpu(answer: GPUAdapter | null | Error): GPU {
  return {
    requestAdapter: async () => {
      if (answer instanceof Error) throw answer;
      return answer;
    },
  } as unknown as GPU;
}

async function failure(promise: Promise<unknown>): Promise<NoAdapterError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(NoAdapterError.isInstance(error)).toBe(true);
  return error as NoAdapterError;
}

describe('acquireBrowserAdapter', () => {
  it('returns the adapter navigator.gpu gives', async () => {
    const adapter = { info: {} } as GPUAdapter;
    const gpu = fakeGpu(adapter);
    const found = await acquireBrowserAdapter({ gpu, isSecureContext: true }, {});
    expect(found.adapter).toBe(adapter);
    expect(found.gpu).toBe(gpu);
  });

  it('navigator.gpu but no adapter: says how to enable WebGPU, not which Node package to install', async () => {
    const error = await failure(
      acquireBrowserAdapter({ gpu: fakeGpu(null), isSecureContext: true }, {}),
    );
    expect(error.tried).toEqual(['navigator.gpu', 'navigator.gpu.requestAdapter()']);
    expect(error.message).toContain('The browser has WebGPU but gave no adapter');
    expect(error.message).toContain('--enable-unsafe-webgpu');
    expect(error.message).toContain('chrome://flags/#enable-unsafe-webgpu');
    expect(error.message).not.toMatch(/npm install|apt-get|VK_ICD_FILENAMES/);
  });

  it('a requestAdapter that throws is listed in what was tried', async () => {
    const error = await failure(
      acquireBrowserAdapter({ gpu: fakeGpu(new Error('device lost')), isSecureContext: true }, {}),
    );
    expect(error.tried).toContain('requestAdapter threw: device lost');
  });

  it('no navigator.gpu in an insecure context: says to serve over https or localhost', async () => {
    const error = await failure(
      acquireBrowserAdapter({ gpu: undefined, isSecureContext: false }, {}),
    );
    expect(error.message).toContain('serve the page over https:// or from http://localhost');
    expect(error.message).not.toMatch(/npm install|apt-get/);
  });

  it('no navigator.gpu in a secure context: the browser lacks WebGPU or has it behind a flag', async () => {
    const error = await failure(
      acquireBrowserAdapter({ gpu: undefined, isSecureContext: true }, {}),
    );
    expect(error.message).toContain('This browser does not expose WebGPU');
    expect(error.message).toContain('--enable-unsafe-webgpu');
  });
});
