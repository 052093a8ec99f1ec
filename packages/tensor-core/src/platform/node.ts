/// <reference types="@webgpu/types" />
/**
 * [Note: the platform module]
 * tensor-core's few Node-only needs (node:fs for safetensors file io and the Vulkan driver lookup,
 * the Dawn `webgpu` package) are reached through the private import `#platform`, never through a
 * `node:` import elsewhere. package.json's `imports` maps it by condition: bundlers building for
 * the web take the `browser` file, whose functions throw `NodeRequiredError`; Node, tests and
 * typecheck take this file. So the root entry is the browser entry too: nothing a `browser`
 * bundle reaches imports a Node built-in (browser-bundle.test.ts bundles it with esbuild), and
 * the Node-only names also live behind `@webshard/tensor-core/node`. Loading stays lazy here, so
 * importing tensor-core in Node still loads neither node:fs nor Dawn until they are used.
 */

/** Which build of `#platform` this is. */
export const RUNTIME: 'node' | 'browser' = 'node';

/**
 * Lets this process's WebAssembly use relaxed SIMD (V8's `--experimental-wasm-relaxed-simd`):
 * Node 20's V8 (11.3) implements it behind that flag, set here before any module that needs it is
 * compiled; V8 shipped it without a flag from 11.4 (Node 22, Chrome 114), where this changes
 * nothing. Flags are per process, so the matmul's worker threads see it too. See [Note: relaxed
 * FMA, chosen once per job].
 */
export function enableRelaxedSimd(): void {
  // A bundle for the web that resolved this file (no `browser` condition) runs it without Node.
  if (typeof process === 'undefined') return;
  const getBuiltin = (
    process as { getBuiltinModule?: (id: string) => typeof import('node:v8') | undefined }
  ).getBuiltinModule;
  getBuiltin?.('node:v8')?.setFlagsFromString('--experimental-wasm-relaxed-simd');
}

/** The Dawn module of the optional `webgpu` package. */
export interface DawnModule {
  create(flags: string[]): GPU;
}

/** `node:fs/promises`, loaded on first use; `op` names the caller in the browser build's error. */
export async function nodeFs(_op: string): Promise<typeof import('node:fs/promises')> {
  return import('node:fs/promises');
}

/** The optional `webgpu` package (Dawn); rejects when it is not installed. */
export async function importDawn(): Promise<DawnModule> {
  return (await import('webgpu')) as unknown as DawnModule;
}

/** A worker thread the CPU matmul started (Node's `Worker` or a page's Web Worker). */
export interface ThreadWorker {
  /**
   * Settles when the worker runs (rejects if it fails first). A page's worker cannot start while
   * its page's main thread is blocked or spinning, so nothing may wait on a worker before this.
   */
  readonly ready: Promise<void>;
  /** Called once if the worker fails (throws at top level, or cannot start). */
  onError(listener: () => void): void;
  terminate(): void;
}

/** What the CPU matmul's worker threads need from the platform (null where there are none). */
export interface NodeThreads {
  /**
   * Starts a worker that calls `loop` (the source of a function expression) with `data` (cloned:
   * a `WebAssembly.Module`, shared memories and `SharedArrayBuffer`s are shared, not copied).
   * Node's workers are unref'd: they never keep the process alive.
   */
  spawnWorker(loop: string, data: object): ThreadWorker;
  /**
   * Cores this process may use (`os.availableParallelism` over `LOCAL_WORLD_SIZE`: [Note: threads
   * per process]; `navigator.hardwareConcurrency`).
   */
  cores: number;
  /** Whether this is the process's main thread (ranks in worker threads already fill the cores). */
  isMainThread: boolean;
  /** Whether this thread may block in `Atomics.wait` (a page's main thread may not). */
  canBlock: boolean;
}

type WorkerThreads = typeof import('node:worker_threads');
type Os = typeof import('node:os');

/**
 * `node:worker_threads` and the cores this process may use: synchronously where Node has
 * `process.getBuiltinModule` (20.16 and later), so a pool can start its workers in the middle of a
 * synchronous call ([Note: matmul threads]); a promise of them on older Nodes.
 */
export function loadThreads(): NodeThreads | null | Promise<NodeThreads | null> {
  const getBuiltin = (process as { getBuiltinModule?: (id: string) => unknown }).getBuiltinModule;
  const threads = getBuiltin?.('node:worker_threads') as WorkerThreads | undefined;
  const os = getBuiltin?.('node:os') as Os | undefined;
  if (threads !== undefined && os !== undefined) return nodeThreads(threads, os);
  return Promise.all([import('node:worker_threads'), import('node:os')]).then(([t, o]) =>
    nodeThreads(t, o),
  );
}

/**
 * [Note: threads per process]
 * The cores a process's matmul takes: all of them, divided by the processes a launcher started on
 * this machine (`LOCAL_WORLD_SIZE`, which webshard-run and torchrun set), as torchrun sets
 * `OMP_NUM_THREADS` for its ranks, so that two process ranks on two cores run a thread each
 * instead of four threads on two cores. Ranks in worker threads take one thread each anyway.
 */
function coresForThisProcess(os: Os): number {
  const cores = os.availableParallelism?.() ?? os.cpus().length;
  const local = Number(process.env.LOCAL_WORLD_SIZE);
  const share = Number.isInteger(local) && local > 1 ? Math.floor(cores / local) : cores;
  return Math.max(1, share);
}

function nodeThreads({ Worker, isMainThread }: WorkerThreads, os: Os): NodeThreads {
  const spawnWorker = (loop: string, data: object): ThreadWorker => {
    const source = `(${loop})(require('node:worker_threads').workerData);`;
    // No execArgv: the loop is plain JavaScript over a compiled module, so a worker needs none of
    // the process's loaders (tsx's hooks made a worker's start wait for this thread's event loop).
    const worker = new Worker(source, { eval: true, workerData: data, execArgv: [] });
    // Referenced until it starts: a process whose only work is awaiting `ready` (a script that
    // awaits `startMatmulThreads()` first) would otherwise exit with the promise unsettled (code
    // 13). Once running it never keeps the process alive.
    const ready = new Promise<void>((resolve, reject) => {
      worker.once('online', resolve);
      worker.once('error', reject);
    }).finally(() => worker.unref());
    return {
      ready,
      onError: (listener) => worker.on('error', listener),
      terminate: () => void worker.terminate(),
    };
  };
  return { spawnWorker, cores: coresForThisProcess(os), isMainThread, canBlock: true };
}
