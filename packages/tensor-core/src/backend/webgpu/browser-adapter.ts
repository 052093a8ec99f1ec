/// <reference types="@webgpu/types" />
import { NoAdapterError } from '../../errors.js';

/** What a page offers for WebGPU: `navigator.gpu` and whether the context is secure. */
export interface BrowserGpuEnvironment {
  gpu: GPU | undefined;
  /** `globalThis.isSecureContext`; undefined where the global does not exist. */
  isSecureContext: boolean | undefined;
}

/** The page's environment, read from the globals. */
export function browserGpuEnvironment(): BrowserGpuEnvironment {
  const scope = globalThis as { navigator?: { gpu?: GPU }; isSecureContext?: boolean };
  return { gpu: scope.navigator?.gpu, isSecureContext: scope.isSecureContext };
}

const ENABLE_HINT =
  'In Chrome or Edge: open chrome://gpu to see why, enable chrome://flags/#enable-unsafe-webgpu, or start the browser with --enable-unsafe-webgpu (on Linux also --enable-features=Vulkan; headless Chromium without a GPU: --enable-unsafe-webgpu --use-angle=swiftshader --enable-features=Vulkan). Firefox: set dom.webgpu.enabled in about:config.';

const SECURE_HINT =
  'WebGPU exists only in a secure context: serve the page over https:// or from http://localhost (this page is not a secure context).';

/**
 * [Note: adapters in a page]
 * In a page there is nothing to install: WebGPU is missing because the context is not secure
 * (`navigator.gpu` is undefined on plain http:// other than localhost), because the browser does
 * not ship it or has it behind a flag, or `requestAdapter()` answers null because the GPU or its
 * driver is blocklisted. The error says which of these it saw and how to turn WebGPU on, never
 * which Node packages to install (the Node path's hints).
 */
export async function acquireBrowserAdapter(
  env: BrowserGpuEnvironment,
  request: GPURequestAdapterOptions,
): Promise<{ gpu: GPU; adapter: GPUAdapter; tried: string[] }> {
  const tried = ['navigator.gpu'];
  const { gpu } = env;
  if (gpu === undefined) {
    if (env.isSecureContext === false) throw new NoAdapterError(tried, SECURE_HINT);
    throw new NoAdapterError(
      tried,
      `This browser does not expose WebGPU (navigator.gpu is undefined). ${ENABLE_HINT}`,
    );
  }
  tried.push('navigator.gpu.requestAdapter()');
  let adapter: GPUAdapter | null;
  try {
    adapter = await gpu.requestAdapter(request);
  } catch (error) {
    tried.push(`requestAdapter threw: ${(error as Error).message}`);
    adapter = null;
  }
  if (adapter !== null) return { gpu, adapter, tried };
  throw new NoAdapterError(
    tried,
    `The browser has WebGPU but gave no adapter (GPU blocklisted, disabled or absent). ${ENABLE_HINT}`,
  );
}
