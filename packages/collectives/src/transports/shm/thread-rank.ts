import { loadWorkerThreads } from '#platform';
import { ArgumentError } from '@webshard/tensor-core';
import { ProcessGroup, type ProcessGroupOptions } from '../../process-group.js';
import type { ShmHandle } from './shm-layout.js';
import { ShmTransport } from './shm-transport.js';

/**
 * [Note: ranks as threads]
 * `webshard-run` can start a node's ranks as worker threads instead of processes (`--ranks-as
 * threads`, the CLI's default on one node) without the script knowing: each thread gets the same
 * environment a process would (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, ... through the Worker's `env`),
 * the same `process.argv`, and in `workerData` under `THREAD_RANK_KEY` the handle of one
 * shared-memory world and its rank. `initProcessGroup` looks there first: in such a thread it joins
 * that `shm` world (the fastest transport here, see the README's benchmarks) instead of the
 * network, so `await initProcessGroup()` is the same line in both. A `backend` the script names
 * (`'tcp'`, `'ws'`) is not used there: rather than refuse a script that runs unchanged as processes
 * (PyTorch's `init_process_group('gloo')` under torchrun never fails over its medium either), the
 * node's local rank 0 emits one Node warning (`WEBSHARD_BACKEND_NOT_USED`, silenced as any other by
 * `--no-warnings`) naming the backend asked for, the one the ranks run over, and
 * `--ranks-as processes` to get the former. In a job of several nodes `backend` is what the nodes
 * talk over (`shm+tcp`, `shm+ws`), so nothing is ignored and nothing is said. The
 * handle travels in `workerData` rather than in a global: it is per thread, needs no registry, and
 * a thread the script starts itself does not inherit it. One thread joins once: a second
 * `ShmTransport` on the same rank would read the same rings, so the second call is refused.
 * Failures go through the launcher: a thread that throws or exits non-zero has its world aborted
 * by the parent (an `error` or `peer-lost` abort naming it), so the others fail at once. So does
 * one that exits with 0 after joining but before closing its group, as a process's closed sockets
 * would tell its peers: the thread posts `joined` and `closed` to the launcher under
 * `THREAD_RANK_KEY` to say which.
 */
export const THREAD_RANK_KEY = 'webshard:thread-rank';

/** What a thread rank tells its launcher (a message `{ [THREAD_RANK_KEY]: event }`). */
export type ThreadRankEvent = 'joined' | 'closed';

/** The shm transport of a thread rank: tells the launcher when it closes. */
class ThreadRankTransport extends ShmTransport {
  constructor(
    handle: ShmHandle,
    rank: number,
    private readonly tell: (event: ThreadRankEvent) => void,
  ) {
    super(handle, rank);
  }

  override async close(): Promise<void> {
    await super.close();
    this.tell('closed');
  }
}

/** What `webshard-run` gives a rank it starts as a worker thread. */
export interface ThreadRankData {
  readonly handle: ShmHandle;
  /** The rank in the node's shm world (its local rank; the world is this node's ranks). */
  readonly rank: number;
  /**
   * Set when the job has several nodes: this node's shm world joins the others over the network
   * ([Note: two-level collectives] in two-level/two-level-transport.ts). `id` names this node's
   * world uniquely; `host` is the machine, for messages.
   */
  readonly node?: { readonly id: string; readonly host: string };
}

let joined = false;

function isThreadRankData(value: unknown): value is ThreadRankData {
  if (value === null || typeof value !== 'object') return false;
  const data = value as Partial<ThreadRankData>;
  return typeof data.rank === 'number' && typeof data.handle === 'object' && data.handle !== null;
}

/**
 * This thread's rank data when `webshard-run` started it as a rank (see [Note: ranks as
 * threads]); `null` in a main thread, another worker, or a browser. `node:worker_threads` comes
 * through `#platform`, so a browser bundle of the main entry has no Node built-in.
 */
export async function threadRankData(): Promise<ThreadRank | null> {
  if (typeof process === 'undefined' || typeof process.versions?.node !== 'string') return null;
  const threads = await loadWorkerThreads();
  if (threads === null) return null;
  const { isMainThread, parentPort, workerData } = threads;
  if (isMainThread || parentPort === null) return null;
  if (workerData === null || typeof workerData !== 'object') return null;
  const data = (workerData as Record<string, unknown>)[THREAD_RANK_KEY];
  if (!isThreadRankData(data)) return null;
  return { ...data, tell: (event) => parentPort.postMessage({ [THREAD_RANK_KEY]: event }) };
}

/** A thread rank's data, and how it tells its launcher what it did. */
export interface ThreadRank extends ThreadRankData {
  readonly tell: (event: ThreadRankEvent) => void;
}

/** The code of the warning a thread rank emits when `backend` is not what it runs over. */
export const BACKEND_NOT_USED = 'WEBSHARD_BACKEND_NOT_USED';

/**
 * Checks a thread rank's join before it happens: `expected` holds what the caller asked for
 * (`rank`, `worldSize`): a value that differs from the launcher's is an `ArgumentError`, since the
 * world cannot honour it, as is a second join of the thread; a `backend` is warned about (see
 * [Note: ranks as threads]).
 */
export function checkThreadRankJoin(
  data: ThreadRank,
  expected: { rank?: number; worldSize?: number; backend?: string },
): void {
  const given = (name: string, value: number | undefined, actual: number) => {
    if (value !== undefined && value !== actual) {
      throw new ArgumentError(
        'initProcessGroup',
        `${name} ${value} was given, but webshard-run started this thread as ${name} ${actual} (rank ${data.rank} of ${data.handle.size})`,
      );
    }
  };
  given('rank', expected.rank, data.rank);
  given('worldSize', expected.worldSize, data.handle.size);
  if (joined) {
    throw new ArgumentError(
      'initProcessGroup',
      `rank ${data.rank}'s thread already joined its shared-memory world: call initProcessGroup once per rank`,
    );
  }
  joined = true;
  if (expected.backend !== undefined && data.rank === 0) {
    process.emitWarning(
      `initProcessGroup: backend '${expected.backend}' is not used: webshard-run started this node's ${data.handle.size} ranks as threads of one process, which run over shm; start them with --ranks-as processes to run over ${expected.backend}`,
      { type: 'WebshardWarning', code: BACKEND_NOT_USED },
    );
  }
}

/** Joins the shm world of a thread rank on its own thread (`checkThreadRankJoin` first). */
export function joinThreadRank(
  data: ThreadRank,
  expected: { rank?: number; worldSize?: number; backend?: string },
  options: ProcessGroupOptions = {},
): ProcessGroup {
  checkThreadRankJoin(data, expected);
  const group = ProcessGroup.fromTransport(
    new ThreadRankTransport(data.handle, data.rank, data.tell),
    options,
  );
  data.tell('joined');
  return group;
}
