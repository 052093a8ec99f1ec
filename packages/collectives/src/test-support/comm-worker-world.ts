import { CommWorker } from '../comm-worker/comm-worker.js';
import type { ProcessGroupOptions } from '../process-group.js';
import { StoreServer } from '../rendezvous/store-server.js';
import { tsxBootstrap } from './shm/shm-suite-run.js';

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
        worker: {
          file: tsxBootstrap('../../comm-worker/comm-worker-main.ts'),
          eval: true,
          execArgv: ['--conditions=@webshard/source'],
        },
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
