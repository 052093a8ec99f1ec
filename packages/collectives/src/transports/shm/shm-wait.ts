/** `Atomics.waitAsync` (Node 16+, ES2024; the repo's lib is ES2023). */
export const waitAsync = (
  Atomics as unknown as {
    waitAsync(
      words: Int32Array,
      index: number,
      value: number,
    ): { async: false; value: string } | { async: true; value: Promise<string> };
  }
).waitAsync;

/** `setImmediate` where it exists (Node), else a zero-delay timer (browsers' Web Workers). */
export const immediate: (run: () => void) => void =
  typeof globalThis.setImmediate === 'function'
    ? (run) => globalThis.setImmediate(run)
    : (run) => setTimeout(run, 0);

/** Resolves on a later turn of the event loop, after the tasks and microtasks queued before it. */
export function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => immediate(resolve));
}
