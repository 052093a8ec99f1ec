import type { RemovableHandle, Tensor } from '@webshard/tensor-core';

/**
 * [Note: turns of the event loop in backward]
 * A rank whose communication progresses on its own thread (an elastic member, a tab, any rank
 * without `--comm-progress worker`) moves bytes only when that thread gives the event loop a turn,
 * and the CPU backend's kernels never do: a GPT-2 backward held a member's thread for some 25 s at
 * a time. Under diloco, what moves in the background then stalls with it: the slices of a join a
 * member uploads to a newcomer ([Note: a diloco join that does not stop the world]) went out at
 * 13.5 Mbit/s of a 20 Mbit/s link in the GPT-2 volunteers run with topk (417 MB in 247 s, where
 * int8's long syncs, which leave the thread free, gave 171 s), a streamed fragment's average, and
 * the heartbeats the coordinator drops a member for missing. So the diloco strategy registers a
 * hook after each parameter's gradient accumulates (the backward engine awaits every hook) that
 * gives the event loop a turn (`setImmediate`; a `MessageChannel` message in a browser, where a
 * nested `setTimeout(0)` waits 4 ms) once `everyMs` has passed since the last: some 150 turns in a
 * GPT-2 backward, a few microseconds each, none when the backward is shorter than `everyMs`.
 * Nothing else changes: the kernels and their order are the same, so the numbers are bit for bit
 * (a turn runs other chains' work, never this backward's). The strategy's turn is its group's
 * `progress()` ([Note: progress turns] in the collectives), during which an shm barrier still
 * waiting for its peers sleeps; a plain `setImmediate` turn let it spin and then block the thread
 * for up to 2 ms in every turn.
 */

/** The default time between turns, ms. */
export const TURN_EVERY_MS = 50;

type Turn = () => Promise<void>;

function makeTurn(): Turn {
  if (typeof setImmediate === 'function') {
    return () => new Promise((resolve) => setImmediate(resolve));
  }
  // A browser or a worker: a message is a task of its own, not clamped as nested timers are.
  const channel = new MessageChannel();
  const waiting: (() => void)[] = [];
  channel.port1.onmessage = () => waiting.shift()?.();
  return () =>
    new Promise((resolve) => {
      waiting.push(resolve);
      channel.port2.postMessage(0);
    });
}

/** What `turnsInBackward` registered. */
export interface BackwardTurns {
  /** Turns given so far. */
  readonly turns: number;
  /** Removes the hooks. */
  remove(): void;
}

/**
 * Registers on each of `params` a post-accumulate hook that gives the event loop a turn (`turn`,
 * by default one `setImmediate`) when `everyMs` passed since the last: [Note: turns of the event
 * loop in backward].
 */
export function turnsInBackward(
  params: readonly Tensor[],
  everyMs = TURN_EVERY_MS,
  now: () => number = () => performance.now(),
  turn: Turn = makeTurn(),
): BackwardTurns {
  let last = now();
  let turns = 0;
  const hook = async () => {
    if (now() - last < everyMs) return;
    await turn();
    turns += 1;
    last = now();
  };
  const handles: RemovableHandle[] = params.map((p) => p.registerPostAccumulateGradHook(hook));
  return {
    get turns() {
      return turns;
    },
    remove() {
      for (const h of handles) h.remove();
    },
  };
}
