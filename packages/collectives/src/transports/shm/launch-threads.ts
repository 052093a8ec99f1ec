import { ArgumentError } from '@webshard/tensor-core';
import { availableParallelism } from 'node:os';
import { parentPort, Worker, workerData } from 'node:worker_threads';
import type { ProcessGroup, ProcessGroupOptions } from '../../process-group.js';
import { joinShm } from './join-shm.js';
import { releaseEndedWorld } from './release-world.js';
import { createShmHandle, type ShmHandle, writeShmAbort } from './shm-layout.js';

/** What `launchThreads` gives each worker in `workerData`. */
export interface ShmWorkerData<T = unknown> {
  readonly handle: ShmHandle;
  readonly rank: number;
  readonly data: T;
  readonly options: ProcessGroupOptions;
  /**
   * Where the rank's communication progresses (`LaunchOptions.progress`): absent or `'thread'`,
   * on the rank's thread; `'worker'`, on its communication worker.
   */
  readonly progress?: 'thread' | 'worker';
}

/** How one rank's worker ended. */
export type ShmRankOutcome<R> =
  | { readonly rank: number; readonly status: 'fulfilled'; readonly value: R }
  | {
      readonly rank: number;
      readonly status: 'rejected';
      /** What the worker threw; `stack` where it had one, so the failing line is on record. */
      readonly error: { name: string; message: string; stack?: string };
    }
  | { readonly rank: number; readonly status: 'exited'; readonly exitCode: number };

export interface LaunchOptions {
  /** Options of every rank's world group (deadlines, segment sizes). */
  group?: ProcessGroupOptions;
  /** Bytes per channel ring (see `createShmHandle`). */
  capacity?: number;
  /** Bytes of each rank's slot in the collectives' arena (see `createShmHandle`). */
  slotBytes?: number;
  /** Barrier spin before sleeping, in microseconds (see `createShmHandle`). */
  spinMicros?: number;
  /** Passed to each `Worker` (e.g. `['--conditions=...']`). */
  execArgv?: string[];
  /** Run `workerFile` as code (`eval: true`), e.g. a bootstrap that registers a TypeScript loader. */
  eval?: boolean;
  /**
   * Where each rank's communication progresses: `'thread'` (default), on the rank's thread;
   * `'worker'`, on a communication worker beside it that attaches the rank's end of the rings and
   * moves and reduces while the rank computes ([Note: the communication worker handshake]): the
   * rank's group is then a `WorkerGroup`. `'worker'` needs the `runShmWorker` of
   * `@webshard/collectives/node` in `workerFile`.
   */
  progress?: 'thread' | 'worker';
}

type WorkerMessage<R> =
  | { type: 'result'; value: R }
  | { type: 'error'; name: string; message: string; stack?: string };

/**
 * Run `size` ranks as worker threads on one shared-memory world and collect what each returns.
 * `workerFile` must call `runShmWorker`. A worker that throws, or exits before returning (crash,
 * `process.exit`, `terminate()`), aborts the world: the parent publishes the abort in shared memory
 * (`peer-lost` naming the rank, or `error` with the exception), so every other rank fails its
 * pending op within milliseconds instead of waiting for its deadline. Once every rank has ended,
 * the world's shared memory is released ([Note: an ended world's memory]).
 */
export async function launchThreads<T, R>(
  size: number,
  workerFile: string | URL,
  data: T,
  options: LaunchOptions = {},
): Promise<ShmRankOutcome<R>[]> {
  const { outcomes, sharedBytes } = await runWorld<T, R>(size, workerFile, data, options);
  // The world's memory goes back to the system now, not whenever this thread next collects.
  releaseEndedWorld(sharedBytes);
  return outcomes;
}

/** `launchThreads`' world, in a scope of its own: nothing of it is held once this returns. */
function runWorld<T, R>(
  size: number,
  workerFile: string | URL,
  data: T,
  options: LaunchOptions,
): Promise<{ outcomes: ShmRankOutcome<R>[]; sharedBytes: number }> {
  const handle = createShmHandle(size, {
    capacity: options.capacity,
    slotBytes: options.slotBytes,
    cores: availableParallelism(),
    spinMicros: options.spinMicros,
  });
  const outcomes = Array.from(
    { length: size },
    (_, rank) =>
      new Promise<ShmRankOutcome<R>>((resolve) => {
        const init: ShmWorkerData<T> = {
          handle,
          rank,
          data,
          options: options.group ?? {},
          ...(options.progress === undefined ? {} : { progress: options.progress }),
        };
        const worker = new Worker(workerFile, {
          workerData: init,
          eval: options.eval ?? false,
          execArgv: options.execArgv ?? [],
        });
        let outcome: ShmRankOutcome<R> | null = null;
        worker.on('message', (message: WorkerMessage<R>) => {
          if (message.type === 'result') {
            outcome = { rank, status: 'fulfilled', value: message.value };
          } else {
            outcome = {
              rank,
              status: 'rejected',
              error: errorRecord(message.name, message.message, message.stack),
            };
            writeShmAbort(handle, {
              kind: 'error',
              origin: rank,
              message: `rank ${rank}'s worker failed: ${message.name}: ${message.message}`,
            });
          }
        });
        worker.on('error', (error) => {
          outcome ??= {
            rank,
            status: 'rejected',
            error: errorRecord(error.name, error.message, error.stack),
          };
          writeShmAbort(handle, {
            kind: 'error',
            origin: rank,
            message: `rank ${rank}'s worker threw: ${error.message}`,
          });
        });
        worker.on('exit', (exitCode) => {
          if (outcome === null) {
            outcome = { rank, status: 'exited', exitCode };
            writeShmAbort(handle, {
              kind: 'peer-lost',
              origin: rank,
              peer: rank,
              message: `rank ${rank}'s worker exited (code ${exitCode}) before finishing`,
            });
          }
          resolve(outcome);
        });
      }),
  );
  return Promise.all(outcomes).then((ended) => ({
    outcomes: ended,
    sharedBytes: [handle.arena, ...(handle.segments ?? [])].reduce(
      (sum, memory) => sum + memory.buffer.byteLength,
      handle.buffer.byteLength,
    ),
  }));
}

/** The rank joins on its own thread; a launch with `progress: 'worker'` needs the node entry's. */
function joinOnThread(init: ShmWorkerData): ProcessGroup {
  if (init.progress === 'worker') {
    throw new ArgumentError(
      'runShmWorker',
      "launchThreads({ progress: 'worker' }): the rank's worker file must run the runShmWorker of @webshard/collectives/node",
    );
  }
  return joinShm(init.handle, init.rank, init.options);
}

function errorRecord(
  name: string,
  message: string,
  stack: string | undefined,
): { name: string; message: string; stack?: string } {
  return stack === undefined ? { name, message } : { name, message, stack };
}

/**
 * The body of a worker started by `launchThreads`: joins the world, runs `main(group, data)`,
 * posts its result to the parent and closes the group. An exception is posted as a failure (the
 * parent aborts the other ranks). `join` makes the rank's group from what the launcher gave
 * (default: `joinShm` on this thread; the node entry's `runShmWorker` passes one that also starts
 * a communication worker for `progress: 'worker'`).
 */
export async function runShmWorker<T, R>(
  main: (group: ProcessGroup, data: T) => Promise<R>,
  join: (init: ShmWorkerData<T>) => ProcessGroup | Promise<ProcessGroup> = joinOnThread,
): Promise<void> {
  const init = workerData as ShmWorkerData<T>;
  if (parentPort === null || init === null || typeof init !== 'object') {
    throw new ArgumentError('runShmWorker', 'must run in a worker started by launchThreads');
  }
  let group: ProcessGroup | null = null;
  try {
    group = await join(init);
    const value = await main(group, init.data);
    parentPort.postMessage({ type: 'result', value });
  } catch (error) {
    const e = error as Error;
    parentPort.postMessage({
      type: 'error',
      name: e?.name ?? 'Error',
      message: e?.message ?? String(error),
      stack: typeof e?.stack === 'string' ? e.stack : undefined,
    });
  } finally {
    await group?.close();
  }
}
