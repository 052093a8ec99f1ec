import { WorkerGroup } from '../comm-worker/worker-group.js';
import { initProcessGroup } from '../init-process-group.js';
import type { NetworkBackend } from '../connect-transport.js';
import { freePort } from '../launcher/launcher.js';
import type { ProcessGroup, ProcessGroupOptions } from '../process-group.js';
import {
  killsARank,
  type RankReport,
  runSuiteJob,
  SUITE_GROUP_OPTIONS,
  type SuiteJob,
} from '../suites/suite.js';
import { runJobInChildren } from './network-world.js';

/** `size` ranks in this thread, each with its communication worker (tests, benchmarks). */
export interface CommWorkerWorld {
  readonly ranks: WorkerGroup[];
  close(): Promise<void>;
}

/**
 * Starts `size` ranks whose communication runs on worker threads (`initProcessGroup` with
 * `progress: 'worker'`), over `backend`; rank 0's worker hosts the store.
 */
export async function createCommWorkerWorld(
  size: number,
  group: ProcessGroupOptions = {},
  backend: NetworkBackend = 'tcp',
  transport: { maxUnexpectedBytes?: number } = {},
): Promise<CommWorkerWorld> {
  const token = 'comm-worker-token';
  const masterPort = await freePort();
  const ranks = await Promise.all(
    Array.from(
      { length: size },
      (_, rank) =>
        initProcessGroup({
          progress: 'worker',
          backend,
          rank,
          worldSize: size,
          localRank: rank,
          masterAddr: '127.0.0.1',
          masterPort,
          token,
          timeoutMs: 20_000,
          group,
          ...transport,
        }) as Promise<WorkerGroup>,
    ),
  );
  return {
    ranks,
    async close() {
      await Promise.all(ranks.map((rank) => rank.close()));
    },
  };
}

/**
 * Runs a suite job on `size` ranks over `backend` with their communication on workers: in this
 * process, or as child processes for the scenarios that kill a rank.
 */
export async function runWorkerSuiteJob(
  backend: NetworkBackend,
  size: number,
  job: SuiteJob,
): Promise<(RankReport | null)[]> {
  if (killsARank(job)) return runJobInChildren(backend, size, job, false, 'stay', 'worker');
  const world = await createCommWorkerWorld(size, SUITE_GROUP_OPTIONS, backend);
  try {
    return await Promise.all(
      world.ranks.map((group) =>
        runSuiteJob(group, job, {
          die: () => {
            throw new Error('in-process ranks cannot die; run the kill scenario in children');
          },
        }),
      ),
    );
  } finally {
    await world.close();
  }
}

/**
 * The kernel of the overlap tests: spins this thread for `ms` milliseconds, no await, no yield;
 * returns when it stopped, on the clock the workers' completion times use.
 */
export function busyFor(ms: number): number {
  const end = performance.now() + ms;
  let x = 0;
  while (performance.now() < end) x += Math.sqrt(x + 1);
  if (x < 0) throw new Error('unreachable');
  return performance.timeOrigin + performance.now();
}

/**
 * One rank's part of the overlap check: after a warm-up all-reduce, an all-reduce of 1 Mi values
 * (each `rank + 1`) issued before a 1.5 s `busyFor` kernel; its first and last values, and whether
 * the worker saw it complete inside the kernel (false on a group that is not a `WorkerGroup`).
 */
export async function allReduceDuringKernel(
  group: ProcessGroup,
): Promise<{ first: number; last: number; insideKernel: boolean }> {
  const count = 1 << 20;
  await group.allReduce(new Float32Array(count)).wait();
  const data = new Float32Array(count).fill(group.rank + 1);
  const issuedAt = performance.timeOrigin + performance.now();
  const work = group.allReduce(data);
  const kernelEnd = busyFor(1500);
  await work.wait();
  const at = WorkerGroup.completedAt(work) ?? 0;
  return { first: data[0]!, last: data[count - 1]!, insideKernel: at > issuedAt && at < kernelEnd };
}
