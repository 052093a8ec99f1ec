import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { CommWorker, type CommWorkerModule } from '../comm-worker/comm-worker.js';
import type { ProcessGroupOptions } from '../process-group.js';
import { StoreServer } from '../rendezvous/store-server.js';

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

/** `size` ranks in this thread, each with its communication worker over tcp (tests, benchmarks). */
export interface CommWorkerWorld {
  readonly ranks: CommWorker[];
  close(): Promise<void>;
}

/** Starts a store and `size` ranks whose communication runs on worker threads, from the sources. */
export async function createCommWorkerWorld(
  size: number,
  group: ProcessGroupOptions = {},
): Promise<CommWorkerWorld> {
  const token = 'comm-worker-token';
  const server = new StoreServer({ port: 0, worldSize: size, token });
  const port = await server.listen();
  const ranks = await Promise.all(
    Array.from({ length: size }, (_, rank) =>
      CommWorker.start({
        storeUrl: `ws://127.0.0.1:${port}`,
        rank,
        size,
        token,
        timeoutMs: 20_000,
        group,
        worker: COMM_WORKER_FROM_SOURCE,
      }),
    ),
  );
  return {
    ranks,
    async close() {
      await Promise.all(ranks.map((rank) => rank.close()));
      await server.close();
    },
  };
}
