import { constants } from 'node:os';

/** How a launch ended. */
export interface LaunchResult {
  /** 0 when every rank succeeded; else the first failed rank's code (128 + signal if killed). */
  exitCode: number;
  /** The first rank that failed, if one did. */
  failedRank?: number;
  /** Each rank's exit code, by local rank (128 + signal number when killed by a signal). */
  rankExitCodes: number[];
}

/** One running rank as the supervisor sees it, whether a child process or a worker thread. */
export interface RankRunner {
  /** Asks the rank to stop (a process gets SIGTERM; a thread's world is aborted). */
  stop(): void;
  /** Stops it now (SIGKILL; `Worker.terminate()`), once the grace period is over. */
  kill(): void;
  /** Passes on a signal the launcher received. */
  signal(signal: NodeJS.Signals): void;
}

/**
 * Starts local rank `localRank` (global `rank`); it calls `exited(code, flushed)` once, as soon as
 * the rank's outcome is known (so the first rank to fail is the one reported), with a promise
 * that resolves once its output is flushed (default: already).
 */
export type StartRank = (
  localRank: number,
  rank: number,
  exited: (exitCode: number, flushed?: Promise<void>) => void,
) => RankRunner;

/** What `supervise` needs besides the ranks. */
export interface SuperviseOptions {
  nprocPerNode: number;
  nodeRank: number;
  /** After a failure or a signal, how long ranks get to stop before `kill()` (ms). */
  graceMs: number;
  /** Forward SIGINT, SIGTERM and SIGHUP to the ranks. */
  forwardSignals: boolean;
}

type SupervisorState =
  | { kind: 'running' }
  | { kind: 'interrupted'; exitCode: number; at: number }
  | { kind: 'tearingDown'; exitCode: number; failedRank?: number; killTimer: NodeJS.Timeout };

/**
 * Signals within this long of the first are copies of it (one Ctrl-C reaches the launcher from
 * the terminal and from the process that started it), not a second request.
 */
export const DUPLICATE_SIGNAL_MS = 500;

/**
 * Runs a node's ranks to the end: the first rank to exit non-zero stops the others (`stop()`,
 * then `kill()` after `graceMs`), and the launch resolves with that rank's code once every rank
 * has ended.
 *
 * [Note: signals in the launcher]
 * A signal to the launcher (SIGINT, SIGTERM, SIGHUP) is passed to every rank once, and the
 * launcher waits: a rank may stop at a safe point of its own (webshard-train finishes its step
 * and saves a checkpoint, all ranks after the same step), which a SIGTERM of its own or a
 * SIGKILL after `graceMs` would cut short. The launch then resolves with 128 + the signal's
 * number. A rank that exits with another failing code meanwhile stops the others as usual. A
 * second signal (more than `DUPLICATE_SIGNAL_MS` after the first) is passed on too, and the ranks
 * still running after `graceMs` are killed. Rank threads (thread-ranks.ts) cannot hear a signal:
 * passing one on terminates them.
 */
export function supervise(options: SuperviseOptions, start: StartRank): Promise<LaunchResult> {
  const { nprocPerNode: nproc, nodeRank, graceMs } = options;
  const runners: RankRunner[] = [];
  const exitCodes: (number | undefined)[] = new Array(nproc).fill(undefined);
  const running = () => runners.filter((_, localRank) => exitCodes[localRank] === undefined);
  let state: SupervisorState = { kind: 'running' };
  let finish: (result: LaunchResult) => void = () => {};
  const done = new Promise<LaunchResult>((resolve) => {
    finish = resolve;
  });

  const tearDown = (exitCode: number, failedRank?: number) => {
    if (state.kind === 'tearingDown') return;
    for (const runner of running()) runner.stop();
    const killTimer = setTimeout(() => {
      for (const runner of running()) runner.kill();
    }, graceMs);
    state = { kind: 'tearingDown', exitCode, killTimer };
    if (failedRank !== undefined) state.failedRank = failedRank;
  };

  const onSignal = (signal: NodeJS.Signals) => {
    const exitCode = 128 + (constants.signals[signal] ?? 0);
    if (state.kind === 'interrupted' && performance.now() - state.at < DUPLICATE_SIGNAL_MS) return;
    for (const runner of running()) runner.signal(signal);
    if (state.kind === 'running') {
      state = { kind: 'interrupted', exitCode, at: performance.now() };
      return;
    }
    if (state.kind === 'interrupted') {
      const killTimer = setTimeout(() => {
        for (const runner of running()) runner.kill();
      }, graceMs);
      state = { kind: 'tearingDown', exitCode: state.exitCode, killTimer };
    }
  };
  const forwarded: NodeJS.Signals[] = options.forwardSignals ? ['SIGINT', 'SIGTERM', 'SIGHUP'] : [];
  for (const signal of forwarded) process.on(signal, onSignal);

  let flushing = 0;
  const settle = () => {
    if (flushing > 0 || exitCodes.some((code) => code === undefined)) return;
    for (const signal of forwarded) process.off(signal, onSignal);
    const codes = exitCodes as number[];
    if (state.kind === 'interrupted') {
      finish({ exitCode: state.exitCode, rankExitCodes: codes });
    } else if (state.kind === 'tearingDown') {
      clearTimeout(state.killTimer);
      const result: LaunchResult = { exitCode: state.exitCode, rankExitCodes: codes };
      if (state.failedRank !== undefined) result.failedRank = state.failedRank;
      finish(result);
    } else {
      finish({ exitCode: 0, rankExitCodes: codes });
    }
  };

  for (let localRank = 0; localRank < nproc; localRank++) {
    const rank = nodeRank * nproc + localRank;
    const exited = (exitCode: number, flushed?: Promise<void>) => {
      if (exitCodes[localRank] !== undefined) return;
      exitCodes[localRank] = exitCode;
      const stoppedBySignal = state.kind === 'interrupted' && exitCode === state.exitCode;
      if (exitCode !== 0 && !stoppedBySignal) tearDown(exitCode, rank);
      if (flushed === undefined) return settle();
      flushing++;
      void flushed.then(() => {
        flushing--;
        settle();
      });
    };
    runners.push(start(localRank, rank, exited));
  }
  return done;
}
