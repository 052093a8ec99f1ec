import { gatherScalar, type ProcessGroup } from '@webshard/collectives';

/**
 * [Note: interrupts]
 * SIGINT (Ctrl-C) and SIGTERM stop a run at a safe point, as a PyTorch script's KeyboardInterrupt
 * handler would, never in the middle of a step: a signal only sets a flag; the loop reads it after
 * each step (every rank of a job reads the same value, agreed by a tiny all-gather settled a step
 * later, [Note: a step line a step late] in run/loop.ts, so all stop after the same step), saves a checkpoint when `--checkpoint-dir` is set, releases the device and
 * ends with an `InterruptedError`: one line on stderr, exit code 130 (SIGINT) or 143 (SIGTERM).
 * Exiting at once instead (the trainer did, with `process.exit`) tore Dawn down under a step in
 * flight: `FATAL ERROR: Error::ThrowAsJavaScriptException napi_throw` from dawn.node (issue 38).
 *
 * A second signal exits at once: the process kills itself with that signal (no JavaScript
 * teardown, so no native crash), after removing half-written outputs. One Ctrl-C can reach a
 * process twice, from the terminal (every process of its group) and from the process that started
 * it and passes signals on (the stderr filter, the launcher); copies within `DUPLICATE_MS` of the
 * first count as the same one. The flag lives in a `SharedArrayBuffer`, so worker-thread ranks
 * (which cannot listen for signals) read the flag their process sets.
 */

/** Signals that stop a run. */
export type StopSignal = 'SIGINT' | 'SIGTERM';

/** Signals within this long of the first are copies of it, not a second request. */
export const DUPLICATE_MS = 500;

const NUMBERS: Record<StopSignal, number> = { SIGINT: 2, SIGTERM: 15 };

/** The exit code of a run a signal stopped: 128 + its number (130, 143). */
export function signalExitCode(signal: StopSignal): 130 | 143 {
  return (128 + NUMBERS[signal]) as 130 | 143;
}

/** A stop request that any thread holding its buffer can read. */
export class StopFlag {
  readonly buffer: SharedArrayBuffer;
  private readonly word: Int32Array;

  constructor(buffer: SharedArrayBuffer = new SharedArrayBuffer(4)) {
    this.buffer = buffer;
    this.word = new Int32Array(buffer, 0, 1);
  }

  /** Asks the run to stop (the first request's signal is kept). */
  request(signal: StopSignal): void {
    Atomics.compareExchange(this.word, 0, 0, NUMBERS[signal]);
  }

  /** The signal that asked the run to stop, or null. */
  get signal(): StopSignal | null {
    const number = Atomics.load(this.word, 0);
    if (number === 0) return null;
    return number === NUMBERS.SIGTERM ? 'SIGTERM' : 'SIGINT';
  }
}

/** What `stopOnSignals` needs from the process (tests pass their own). */
export interface SignalHost {
  on(signal: StopSignal, listener: () => void): void;
  off(signal: StopSignal, listener: () => void): void;
  /** Ends the process now, killed by `signal`. */
  killSelf(signal: StopSignal): void;
  now(): number;
}

const nodeHost: SignalHost = {
  on: (signal, listener) => process.on(signal, listener),
  off: (signal, listener) => process.off(signal, listener),
  killSelf: (signal) => {
    process.kill(process.pid, signal);
    // Should the default action not come at once, leave anyway.
    setTimeout(() => process.exit(signalExitCode(signal)), 1000).unref();
  },
  now: () => performance.now(),
};

/**
 * Listens for SIGINT and SIGTERM: the first sets the returned flag; another one more than
 * `DUPLICATE_MS` later calls `beforeExit` (remove pending outputs) and ends the process by that
 * signal ([Note: interrupts]). Returns the flag and a function that stops listening.
 */
export function stopOnSignals(
  beforeExit: () => void,
  host: SignalHost = nodeHost,
): { flag: StopFlag; dispose: () => void } {
  const flag = new StopFlag();
  let first: number | null = null;
  const listeners = (['SIGINT', 'SIGTERM'] as const).map((signal) => {
    const listener = () => {
      if (first === null) {
        first = host.now();
        flag.request(signal);
        return;
      }
      if (host.now() - first < DUPLICATE_MS) return;
      dispose();
      beforeExit();
      host.killSelf(signal);
    };
    host.on(signal, listener);
    return [signal, listener] as const;
  });
  const dispose = () => {
    for (const [signal, listener] of listeners) host.off(signal, listener);
  };
  return { flag, dispose };
}

/**
 * The stop request every rank of `group` acts on after a step: the strongest any rank has seen
 * (SIGTERM over SIGINT), the same on every rank; without a group, `flag`'s own. A collective when
 * the group has several ranks, so every rank calls it after every step.
 */
export async function agreedStop(
  flag: { readonly signal: StopSignal | null } | undefined,
  group: ProcessGroup | null,
): Promise<StopSignal | null> {
  const mine = flag?.signal ?? null;
  if (group === null || group.size === 1) return mine;
  return strongestStop(await gatherScalar(group, stopNumber(flag)));
}

/** What a rank sends for `agreedStop`: 0 for none, else its signal's number. */
export function stopNumber(flag: { readonly signal: StopSignal | null } | undefined): number {
  const mine = flag?.signal ?? null;
  return mine === null ? 0 : NUMBERS[mine];
}

/** The stop every rank acts on, from every rank's `stopNumber`: SIGTERM over SIGINT over none. */
export function strongestStop(numbers: readonly number[]): StopSignal | null {
  const strongest = Math.max(...numbers);
  if (strongest === 0) return null;
  return strongest === NUMBERS.SIGTERM ? 'SIGTERM' : 'SIGINT';
}
