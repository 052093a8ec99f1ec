import type { Backend } from '../backend/backend.js';

/**
 * Run `fn` and wait for the backend; return what it threw, synchronously (the CPU backend) or at
 * the next `sync` (WebGPU defers kernel errors such as an out-of-range index), or undefined.
 * Lets one test assert the same error on every backend.
 */
export async function catchDeferred(backend: Backend, fn: () => unknown): Promise<unknown> {
  try {
    fn();
    await backend.sync();
    return undefined;
  } catch (error) {
    return error;
  }
}
