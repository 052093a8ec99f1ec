// Starts shm ranks (worker threads) for the tests: each registers tsx and imports a worker file
// beside this one.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { launchThreads, type ShmRankOutcome } from '@webshard/collectives/node';

const require = createRequire(import.meta.url);
const here = dirname(fileURLToPath(import.meta.url));
const tsx = pathToFileURL(require.resolve('tsx/esm/api').replace(/\.cjs$/, '.mjs')).href;

/** Runs `job` on `size` shm ranks, each running the worker module `file` (in test-support/). */
export function runShm<J, R>(size: number, file: string, job: J): Promise<ShmRankOutcome<R>[]> {
  const worker = pathToFileURL(join(here, file)).href;
  const bootstrap = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(worker)}); })`;
  return launchThreads<J, R>(size, bootstrap, job, {
    eval: true,
    execArgv: ['--conditions=@webshard/source'],
    group: { timeoutMs: 20_000 },
  });
}
