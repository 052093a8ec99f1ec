/**
 * The next turn of the event loop: `setImmediate` in Node; in a browser, which has none, a
 * `MessageChannel` message (a zero-delay timer is clamped to 4 ms once nested).
 */
export const nextTurn: (run: () => void) => void =
  typeof globalThis.setImmediate === 'function'
    ? (run) => globalThis.setImmediate(run)
    : (() => {
        const channel = new MessageChannel();
        const queued: (() => void)[] = [];
        channel.port1.onmessage = () => queued.shift()?.();
        return (run: () => void) => {
          queued.push(run);
          channel.port2.postMessage(null);
        };
      })();

/** Resolves on a later turn of the event loop, after the tasks and microtasks queued before it. */
export function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => nextTurn(resolve));
}

let turns = 0;

/**
 * [Note: progress turns]
 * On a group whose communication runs on the rank's own thread, a collective moves only when that
 * thread runs its event loop: a socket's bytes are read, a ring's next step sent, a barrier
 * re-checked. Backward never gives it a turn by itself (the engine awaits its hooks, which are
 * microtasks), so an all-reduce issued in backward (DDP's overlapped bucket) waited for the end of
 * backward, and then every bucket's hand-offs ran one after another. `progressTurn` is one turn
 * of the event loop taken on purpose between kernels: what has arrived is read and answered, then
 * compute goes on. While it runs, `inProgressTurn()` is true, and an shm barrier that is still
 * waiting for its peers sleeps instead of spinning or blocking the thread in `Atomics.wait`
 * ([Note: barrier waits]): the thread has compute to go back to. `ProcessGroup.progress()` takes
 * one; a group whose communication runs on a worker needs none.
 */
export async function progressTurn(): Promise<void> {
  turns++;
  try {
    await yieldToEventLoop();
  } finally {
    turns--;
  }
}

/** Whether this thread is inside a `progressTurn` (so it has compute to go back to). */
export function inProgressTurn(): boolean {
  return turns > 0;
}
