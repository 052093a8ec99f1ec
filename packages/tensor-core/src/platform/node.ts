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

/** What the CPU matmul's worker threads need from Node (null where there are none). */
export interface NodeThreads {
  Worker: typeof import('node:worker_threads').Worker;
  /** Cores this process may use (`os.availableParallelism`). */
  cores: number;
  /** Whether this is the process's main thread (ranks in worker threads already fill the cores). */
  isMainThread: boolean;
}

/** `node:worker_threads` and the core count, loaded on first use. */
export async function importThreads(): Promise<NodeThreads | null> {
  const [{ Worker, isMainThread }, os] = await Promise.all([
    import('node:worker_threads'),
    import('node:os'),
  ]);
  return { Worker, cores: os.availableParallelism?.() ?? os.cpus().length, isMainThread };
}
