import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { CommWorkerInit, CommWorkerModule, CommWorkerThread } from './handshake.js';

/**
 * Starting a communication worker: the only module of the worker path that needs Node's
 * `worker_threads` (loaded through `#platform`'s `loadWorkerStarter`, so the main entry stays
 * loadable and bundlable for browsers, [Note: the collectives platform module]). Which module the worker runs: `comm-worker-main.js` beside this code
 * in the built package (tsup's `comm-worker-main` entry, in `dist/` with the chunks), or, when this
 * code runs from the TypeScript sources (tests, `pnpm bench`, the `@webshard/source` condition),
 * `comm-worker-main.ts` through tsx.
 */

/** This module's URL: `import.meta.url`, or `__filename` in the CommonJS build. */
function here(): string {
  const url = (import.meta as { url?: string }).url;
  return url ?? pathToFileURL(__filename).href;
}

/** The worker's module for the code that runs now: built, or from the sources. */
export function defaultWorkerModule(): CommWorkerModule {
  const self = here();
  if (!self.endsWith('.ts')) return { file: new URL('./comm-worker-main.js', self) };
  const tsx = pathToFileURL(
    createRequire(self)
      .resolve('tsx/esm/api')
      .replace(/\.cjs$/, '.mjs'),
  ).href;
  const main = pathToFileURL(fileURLToPath(new URL('./comm-worker-main.ts', self))).href;
  return {
    file: `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(main)}); })`,
    eval: true,
    execArgv: ['--conditions=@webshard/source'],
  };
}

/** Starts the worker of `module` (default: `defaultWorkerModule()`) with `init`. */
export function startWorker(init: CommWorkerInit, module?: CommWorkerModule): CommWorkerThread {
  const { file, eval: isEval, execArgv } = module ?? defaultWorkerModule();
  return new Worker(file, {
    eval: isEval ?? false,
    execArgv: execArgv ?? [],
    workerData: { commWorker: init },
  });
}
