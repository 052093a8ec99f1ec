/// <reference types="@webgpu/types" />
import { importDawn, nodeFs, RUNTIME } from '#platform';
import { NoAdapterError } from '../../errors.js';
import { acquireBrowserAdapter, browserGpuEnvironment } from './browser-adapter.js';

/** How to find a WebGPU adapter. */
export interface AdapterOptions {
  powerPreference?: GPUPowerPreference;
  /**
   * Look for a SwiftShader Vulkan driver when no other adapter answers (default true; the
   * environment variable `WEBSHARD_NO_SWIFTSHADER=1` turns it off).
   */
  swiftShaderFallback?: boolean;
  /**
   * Dawn's `disable_robustness` (default true; `WEBSHARD_WEBGPU_ROBUSTNESS=1` keeps robustness).
   * See [Note: robustness].
   */
  disableRobustness?: boolean;
  /**
   * Node only: take the adapter whose name contains this text (Dawn's `adapter=` toggle), such as
   * `'SwiftShader'` or `'llvmpipe'` where several Vulkan drivers are installed. Default: the
   * environment variable `WEBSHARD_ADAPTER`, else Dawn's first choice.
   */
  adapter?: string;
}

/** Where Debian, Ubuntu, Fedora and Chrome install SwiftShader's Vulkan ICD manifest. */
export const SWIFTSHADER_ICD_PATHS: readonly string[] = [
  '/usr/lib/chromium/vk_swiftshader_icd.json',
  '/usr/lib/chromium-browser/vk_swiftshader_icd.json',
  '/usr/lib64/chromium-browser/vk_swiftshader_icd.json',
  '/opt/google/chrome/vk_swiftshader_icd.json',
  '/snap/chromium/current/usr/lib/chromium-browser/vk_swiftshader_icd.json',
];

const DRIVER_ICD_DIRS = ['/usr/share/vulkan/icd.d', '/etc/vulkan/icd.d'];

const INSTALL_HINT =
  'Install a Vulkan driver, or SwiftShader for a CPU fallback: apt-get install -y libvulkan1 chromium-common (or set VK_ICD_FILENAMES to a Vulkan ICD manifest)';

/**
 * [Note: strong references to the GPU instance]
 *
 * The object the `webgpu` package's `create()` returns owns Dawn's instance; if JavaScript
 * garbage-collects it while a device made from it is alive, the process segfaults, aborts or hangs
 * (ANCHORS.md). Every instance created here is kept in this module-level array for the life of the
 * process, and backends also hold their own reference.
 */
const liveInstances: GPU[] = [];

/**
 * [Note: finding SwiftShader]
 *
 * Measured with webgpu 0.6.2: the Vulkan loader reads `VK_ICD_FILENAMES` each time a Dawn instance
 * is created, so a second `create()` after changing the variable does pick up SwiftShader. But a
 * `create()` + `requestAdapter()` that finds nothing costs about 0.5 s. So when the user has not set
 * `VK_ICD_FILENAMES` and no driver manifest exists in /usr/share/vulkan/icd.d or /etc/vulkan/icd.d
 * (no real Vulkan driver is installed), the default attempt is skipped and SwiftShader is tried
 * directly; otherwise the default drivers go first and SwiftShader is the retry.
 *
 * [Note: robustness]
 *
 * Dawn's robustness transform clamps every storage access; `disable_robustness` removes it (about
 * +30 % on SwiftShader matmul, ANCHORS.md). The kernels here stay in bounds by construction: every
 * element-wise invocation checks its index against the size, matmul clamps the rows and columns it
 * loads and guards its stores, gather and cross-entropy clamp a bad index after raising the error
 * flag, and scatterAdd skips it.
 */
export interface AcquiredAdapter {
  gpu: GPU;
  adapter: GPUAdapter;
  /** What was tried, in order (for errors and logs). */
  tried: string[];
}

async function fileExists(path: string): Promise<boolean> {
  const { access } = await nodeFs('webgpu');
  try {
    await access(path);
    return true;
  } catch {
    return false;
  }
}

async function hasDriverManifest(): Promise<boolean> {
  const { readdir } = await nodeFs('webgpu');
  for (const dir of DRIVER_ICD_DIRS) {
    try {
      const entries = await readdir(dir);
      if (entries.some((e) => e.endsWith('.json'))) return true;
    } catch {
      // a missing directory has no drivers
    }
  }
  return false;
}

function envFlag(name: string): boolean {
  return typeof process !== 'undefined' && process.env?.[name] === '1';
}

/**
 * Finds an adapter: `navigator.gpu` in browsers (and in any bundle built with the `browser`
 * condition), the `webgpu` package (Dawn) in Node. See [Note: adapters in a page].
 */
export async function acquireAdapter(options: AdapterOptions = {}): Promise<AcquiredAdapter> {
  const request: GPURequestAdapterOptions = {};
  if (options.powerPreference) request.powerPreference = options.powerPreference;
  const tried: string[] = [];
  const isNode = typeof process !== 'undefined' && process.versions?.node !== undefined;
  if (!isNode || RUNTIME === 'browser') {
    return acquireBrowserAdapter(browserGpuEnvironment(), request);
  }

  let webgpu: { create(flags: string[]): GPU };
  try {
    webgpu = await importDawn();
  } catch (error) {
    tried.push(`import('webgpu') failed: ${(error as Error).message}`);
    throw new NoAdapterError(tried, 'Install the optional dependency: npm install webgpu');
  }
  const robust =
    options.disableRobustness === false || envFlag('WEBSHARD_WEBGPU_ROBUSTNESS') === true;
  const flags = robust ? [] : ['enable-dawn-features=disable_robustness'];
  const wanted = options.adapter ?? (process.env.WEBSHARD_ADAPTER || undefined);
  if (wanted !== undefined) flags.push(`adapter=${wanted}`);
  const attempt = async (label: string): Promise<AcquiredAdapter | undefined> => {
    tried.push(wanted === undefined ? label : `${label} (adapter named like '${wanted}')`);
    const gpu = webgpu.create(flags);
    liveInstances.push(gpu);
    try {
      const adapter = await gpu.requestAdapter(request);
      return adapter ? { gpu, adapter, tried } : undefined;
    } catch (error) {
      // Dawn throws, listing the adapters it has, when none matches the `adapter=` toggle.
      tried.push(`Dawn: ${(error as Error).message.replace(/\s+/g, ' ').trim()}`);
      return undefined;
    }
  };

  const userIcd = process.env.VK_ICD_FILENAMES;
  if (userIcd !== undefined || (await hasDriverManifest())) {
    const found = await attempt(
      userIcd !== undefined ? `VK_ICD_FILENAMES=${userIcd}` : 'the default Vulkan drivers',
    );
    if (found) return found;
  } else {
    tried.push(`no Vulkan driver manifest in ${DRIVER_ICD_DIRS.join(' or ')}`);
  }
  const fallback = options.swiftShaderFallback ?? !envFlag('WEBSHARD_NO_SWIFTSHADER');
  if (fallback) {
    for (const path of SWIFTSHADER_ICD_PATHS) {
      if (!(await fileExists(path))) continue;
      process.env.VK_ICD_FILENAMES = path;
      const found = await attempt(`SwiftShader at ${path}`);
      if (found) return found;
    }
    tried.push(`SwiftShader (looked in ${SWIFTSHADER_ICD_PATHS.join(', ')})`);
  } else {
    tried.push('SwiftShader lookup disabled');
  }
  throw new NoAdapterError(tried, INSTALL_HINT);
}

/** True for CPU (SwiftShader-class) adapters, where register-tiled kernels beat shared memory. */
export function isCpuAdapter(adapter: GPUAdapter): boolean {
  const info = adapter.info as GPUAdapterInfo | undefined;
  const text = `${info?.vendor ?? ''} ${info?.architecture ?? ''} ${info?.device ?? ''} ${info?.description ?? ''}`;
  return /swiftshader|llvmpipe|lavapipe|warp|software/i.test(text);
}

/** A one-line description of an adapter. */
export function describeAdapter(adapter: GPUAdapter): string {
  const info = adapter.info as GPUAdapterInfo | undefined;
  const parts = [info?.vendor, info?.architecture, info?.device, info?.description].filter(
    (p): p is string => typeof p === 'string' && p.length > 0,
  );
  return parts.length > 0 ? parts.join(' / ') : 'unknown adapter';
}

/**
 * The WebGPU flag values (spec constants). Node's `webgpu` package only defines the `GPUBufferUsage`
 * globals if its `globals` are installed, which tensor-core does not do (no side effects).
 */
export const BufferUsage = {
  MAP_READ: 0x0001,
  COPY_SRC: 0x0004,
  COPY_DST: 0x0008,
  STORAGE: 0x0080,
} as const;

export const MapMode = { READ: 0x0001 } as const;

/** What the synchronous WebGPU availability check reads from Node (fs and module resolution). */
export interface AvailabilityProbe {
  existsSync(path: string): boolean;
  readdirSync(path: string): string[];
  /** Whether the optional `webgpu` package resolves from tensor-core. */
  webgpuResolves(): boolean;
}

/**
 * Why `createWebGpuBackend` would fail here, by a quick synchronous look, or undefined when it
 * likely succeeds: in browsers, whether `navigator.gpu` exists; in Node (through `probe`), whether
 * the `webgpu` package resolves and a Vulkan driver manifest or a SwiftShader ICD is installed (or
 * `VK_ICD_FILENAMES` names an existing file). It does not load Vulkan, so a missing libvulkan
 * still fails at creation.
 */
export function webGpuUnavailableReason(probe: AvailabilityProbe | undefined): string | undefined {
  const isNode = typeof process !== 'undefined' && process.versions?.node !== undefined;
  if (!isNode) {
    const gpu = (globalThis as { navigator?: { gpu?: unknown } }).navigator?.gpu;
    return gpu !== undefined ? undefined : 'this browser does not expose navigator.gpu';
  }
  if (probe === undefined) {
    return `Node ${process.versions.node} gives no synchronous access to node:fs here (process.getBuiltinModule needs Node >= 20.16; use @webshard/tensor-core/testing's check)`;
  }
  if (!probe.webgpuResolves()) {
    return "the optional dependency 'webgpu' is not installed (npm install webgpu)";
  }
  const userIcd = process.env.VK_ICD_FILENAMES;
  if (userIcd !== undefined) {
    return probe.existsSync(userIcd) ? undefined : `VK_ICD_FILENAMES=${userIcd} does not exist`;
  }
  const driver = DRIVER_ICD_DIRS.some(
    (dir) => probe.existsSync(dir) && probe.readdirSync(dir).some((e) => e.endsWith('.json')),
  );
  if (driver) return undefined;
  if (envFlag('WEBSHARD_NO_SWIFTSHADER')) {
    return `no Vulkan driver manifest in ${DRIVER_ICD_DIRS.join(' or ')}, and WEBSHARD_NO_SWIFTSHADER=1`;
  }
  if (SWIFTSHADER_ICD_PATHS.some((p) => probe.existsSync(p))) return undefined;
  return `no Vulkan driver manifest in ${DRIVER_ICD_DIRS.join(' or ')} and no SwiftShader ICD at ${SWIFTSHADER_ICD_PATHS.join(', ')}. ${INSTALL_HINT}`;
}

/** The probe over Node's `fs` and `module`, however the caller obtained them. */
export function nodeAvailabilityProbe(
  fs: Pick<typeof import('node:fs'), 'existsSync' | 'readdirSync'>,
  nodeModule: Pick<typeof import('node:module'), 'createRequire'>,
): AvailabilityProbe {
  return {
    existsSync: (path) => fs.existsSync(path),
    readdirSync: (path) => fs.readdirSync(path),
    webgpuResolves: () => {
      try {
        nodeModule.createRequire(moduleLocation()).resolve('webgpu');
        return true;
      } catch {
        return false;
      }
    },
  };
}

/** Where module resolution starts from: this file, in the ESM build, the CJS build and tests. */
export function moduleLocation(): string {
  return typeof __filename === 'string' ? __filename : import.meta.url;
}

/**
 * Node's builtins without a static import (this module also runs in browsers):
 * `process.getBuiltinModule` (Node >= 20.16), else a CommonJS `require` in scope (the CJS build).
 * ESM on an older Node 20 has neither.
 */
function nodeBuiltins(): ((id: string) => unknown) | undefined {
  const getBuiltin = (process as { getBuiltinModule?: (id: string) => unknown }).getBuiltinModule;
  if (getBuiltin) return (id) => getBuiltin(id);
  if (typeof require === 'function') return (id) => require(id) as unknown;
  return undefined;
}

/**
 * A quick synchronous guess whether `createWebGpuBackend` can succeed here (see
 * `webGpuUnavailableReason`). In Node it needs synchronous access to node:fs: Node >= 20.16, or
 * the CJS build; under ESM on an older Node 20 it answers false. Tests decide with the testing
 * entry's check instead, which imports node:fs statically and works on every Node 20.
 */
export function webGpuLikelyAvailable(): boolean {
  const isNode = typeof process !== 'undefined' && process.versions?.node !== undefined;
  if (!isNode) return webGpuUnavailableReason(undefined) === undefined;
  const load = nodeBuiltins();
  if (load === undefined) return false;
  const fs = load('node:fs') as typeof import('node:fs');
  const nodeModule = load('node:module') as typeof import('node:module');
  return webGpuUnavailableReason(nodeAvailabilityProbe(fs, nodeModule)) === undefined;
}
