import { loadThreads, type NodeThreads } from '#platform';

// How many threads a matmul pool runs: what the platform can say before the pool starts, and
// what a pool asked for `'auto'` or a count gets on it ([Note: matmul threads] in matmul-threads.ts).

/**
 * The threads a pool asked for `threads` would run, where the platform can say so now: 1 where
 * no worker can start, and for `'auto'` in a worker thread or a process whose share of the cores
 * is one ([Note: threads per process]); null where the platform loads asynchronously (Nodes
 * before 20.16), and the pool decides when it starts. A matmul that will run on one thread takes
 * a memory of its own, not a shared one ([Note: a shared memory only for threads] in
 * `matmul-wasm-load.ts`).
 */
export function threadsKnownNow(threads: number | 'auto'): number | null {
  const platform = loadThreads();
  if (platform instanceof Promise) return null;
  return platform === null ? 1 : threadsOn(platform, threads);
}

/** Threads asked for on `platform`: `'auto'` is one per core on the main thread, else one. */
export function threadsOn(platform: NodeThreads, threads: number | 'auto'): number {
  return threads === 'auto' ? (platform.isMainThread ? platform.cores : 1) : threads;
}
