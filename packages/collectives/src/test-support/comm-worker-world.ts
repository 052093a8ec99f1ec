import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import type { CommWorkerModule } from '../comm-worker/comm-worker.js';
import { WorkerGroup } from '../comm-worker/worker-group.js';
import type { NetworkBackend } from '../connect-transport.js';
import { freePort } from '../launcher/launcher.js';
import type { ProcessGroupOptions } from '../process-group.js';

const tsx = pathToFileURL(
  createRequire(import.meta.url)
    .resolve('tsx/esm/api')
    .replace(/\.cjs$/, '.mjs'),
).href;
const main = pathToFileURL(
  new URL('../comm-worker/comm-worker-main.ts', import.meta.url).pathname,
).href;

/**
 * The communication worker's module from the TypeScript sources (tests, benchmarks): a bootstrap
 * that registers tsx, then imports comm-worker-main.ts.
 */
export const COMM_WORKER_FROM_SOURCE: CommWorkerModule = {
  file: `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(main)}); })`,
  eval: true,
  execArgv: ['--conditions=@webshard/source'],
};

/** `size` ranks in this thread, each with its communication worker (tests, benchmarks). */
export interface CommWorkerWorld {
  readonly ranks: WorkerGroup[];
  close(): Promise<void>;
}

/**
 * Starts `size` ranks whose communication runs on worker threads, from the sources, over
 * `backend`; rank 0's worker hosts the store.
 */
export async function createCommWorkerWorld(
  size: number,
  group: ProcessGroupOptions = {},
  backend: NetworkBackend = 'tcp',
): Promise<CommWorkerWorld> {
  const token = 'comm-worker-token';
  const masterPort = await freePort();
  const ranks = await Promise.all(
    Array.from({ length: size }, (_, rank) =>
      WorkerGroup.start({
        connect: {
          backend,
          rank,
          worldSize: size,
          localRank: rank,
          masterAddr: '127.0.0.1',
          masterPort,
          token,
          timeoutMs: 20_000,
        },
        group,
        worker: COMM_WORKER_FROM_SOURCE,
      }),
    ),
  );
  return {
    ranks,
    async close() {
      await Promise.all(ranks.map((rank) => rank.close()));
    },
  };
}
