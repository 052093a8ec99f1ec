import { NodeRequiredError } from '../errors.js';
import type * as NodePlatform from './node.js';

// `#platform` for bundles built with the `browser` condition: the same names as ./node.ts, none
// of which imports a Node module. See [Note: the platform module].

export type { ThreadWorker } from './node.js';

/** Which build of `#platform` this is. */
export const RUNTIME: typeof NodePlatform.RUNTIME = 'browser';

/** Nothing to do: a page's engine has relaxed SIMD or not, by its version. */
export const enableRelaxedSimd: typeof NodePlatform.enableRelaxedSimd = () => {};

/** Throws: a page has no file system (fetch the bytes and use `decodeSafetensors`). */
export const nodeFs: typeof NodePlatform.nodeFs = async (op) => {
  throw new NodeRequiredError(
    op,
    'a page has no file system; fetch the bytes and call decodeSafetensors / encodeSafetensors instead',
  );
};

/** Throws: pages use `navigator.gpu`, never the Dawn package. */
export const importDawn: typeof NodePlatform.importDawn = async () => {
  throw new NodeRequiredError(
    'webgpu',
    'the webgpu package is Dawn for Node; pages use navigator.gpu',
  );
};

/**
 * Web Workers for the CPU matmul where the page can share memory with them (cross-origin
 * isolated: `SharedArrayBuffer` exists); null elsewhere, and the matmul runs on one thread. A
 * worker is a Blob URL whose first message is its data, and which answers once it runs (a worker
 * cannot start while the page's main thread is busy, so the pool waits for that answer before it
 * splits a call); the page's main thread cannot block in `Atomics.wait` (a worker can).
 */
export const loadThreads: typeof NodePlatform.loadThreads = () => {
  const scope = globalThis as {
    crossOriginIsolated?: boolean;
    Worker?: typeof Worker;
    WorkerGlobalScope?: unknown;
    navigator?: { hardwareConcurrency?: number };
  };
  if (scope.crossOriginIsolated !== true || scope.Worker === undefined) return null;
  if (typeof SharedArrayBuffer === 'undefined') return null;
  const inWorker = scope.WorkerGlobalScope !== undefined;
  const spawnWorker = (loop: string, data: object): NodePlatform.ThreadWorker => {
    const source = `onmessage = (event) => { onmessage = null; postMessage('ready'); (${loop})(event.data); };`;
    const url = URL.createObjectURL(new Blob([source], { type: 'text/javascript' }));
    const worker = new scope.Worker!(url);
    const ready = new Promise<void>((resolve, reject) => {
      worker.addEventListener('message', () => resolve(), { once: true });
      worker.addEventListener('error', (event) => reject(new Error(event.message)), { once: true });
    });
    worker.postMessage(data);
    return {
      ready,
      onError: (listener) => worker.addEventListener('error', () => listener()),
      terminate: () => {
        worker.terminate();
        URL.revokeObjectURL(url);
      },
    };
  };
  return {
    spawnWorker,
    cores: scope.navigator?.hardwareConcurrency ?? 1,
    isMainThread: !inWorker,
    canBlock: inWorker,
  };
};
