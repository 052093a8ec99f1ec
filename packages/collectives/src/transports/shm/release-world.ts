import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/**
 * [Note: an ended world's memory]
 * A thread world's shared memory (the shm handle's arena and segments, `WebAssembly.Memory`s with
 * the registered buffers in them: some 2 GiB touched at GPT-2 size with 2 ranks, and the rings'
 * `SharedArrayBuffer`) is created by the launching thread and goes back to the system only when
 * that thread's garbage collector frees the handle, after the ranks' threads have ended. Nothing
 * prompts that collection: the launching thread's own heap stays small, and V8 does not count a
 * shared memory's pages as pressure on it. So a process that launches worlds one after another
 * (a bench's variants, a sweep, a test file) kept every ended world's pages: the fsdp bench at
 * GPT-2 size held 13 GB after three launches over shm, and the fourth failed with
 * `RegisteredMemoryError` when the system refused the arena's next pages (2026-11-26; 1.5 GiB more
 * resident a launch at 4 blocks of 768). `launchThreads` therefore collects once its ranks have all
 * ended and it holds nothing of the world: a full collection of the launching thread (60-140 ms
 * with a 43 MB heap on the 2-core machine), through V8's `gc`, exposed for it where the process
 * was not started with `--expose-gc`. Only after a world that held `COLLECT_FROM_BYTES` of shared
 * memory or more (its rings, arena and segments as grown): a small world (2 ranks: some 15 MiB)
 * is not worth a collection, and a test file launches hundreds of them.
 */
const COLLECT_FROM_BYTES = 128 * 2 ** 20;

/** After a world that held `sharedBytes` of shared memory: [Note: an ended world's memory]. */
export function releaseEndedWorld(sharedBytes: number): void {
  if (sharedBytes < COLLECT_FROM_BYTES) return;
  const exposed = (globalThis as { gc?: () => void }).gc;
  if (exposed !== undefined) {
    exposed();
    return;
  }
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}
