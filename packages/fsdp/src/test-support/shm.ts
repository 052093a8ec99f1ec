import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { launchThreads } from '@webshard/collectives/node';
import type { FsdpOptions } from '../api.js';
import type { ParityResult, ParityRun } from './parity.js';

const tsx = pathToFileURL(
  createRequire(import.meta.url)
    .resolve('tsx/esm/api')
    .replace(/\.cjs$/, '.mjs'),
).href;

/** Worker code that registers tsx, then imports the TypeScript module `file` (beside this one). */
export function tsxBootstrap(file: string): string {
  const worker = pathToFileURL(new URL(file, import.meta.url).pathname).href;
  return `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(worker)}); })`;
}

/** `world` ranks as worker threads over shm; each rank's result. Throws if a rank failed. */
export async function trainShm(
  world: number,
  run: ParityRun,
  options: Omit<FsdpOptions, 'group'> = {},
): Promise<ParityResult[]> {
  const outcomes = await launchThreads<unknown, ParityResult>(
    world,
    tsxBootstrap('./shm-rank.ts'),
    { run, options },
    { eval: true, execArgv: ['--conditions=@webshard/source'], group: { timeoutMs: 30_000 } },
  );
  return outcomes.map((o) => {
    if (o.status === 'fulfilled') return o.value;
    throw new Error(
      `rank ${o.rank} ${o.status === 'rejected' ? `threw ${o.error.name}: ${o.error.message}\n${o.error.stack}` : `exited with ${o.exitCode}`}`,
    );
  });
}
