// Test helpers that start ranks: shm worker threads (launchThreads) and webshard-run processes.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { launchThreads, type ShmRankOutcome } from '@webshard/collectives/node';
import type { ParityJob, ParityReport } from './parity.js';

const require = createRequire(import.meta.url);
const here = dirname(fileURLToPath(import.meta.url));
const tsx = pathToFileURL(require.resolve('tsx/esm/api').replace(/\.cjs$/, '.mjs')).href;

/** Worker code that registers tsx, then imports the TypeScript module `file` (beside this one). */
function tsxBootstrap(file: string): string {
  const worker = pathToFileURL(join(here, file)).href;
  return `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(worker)}); })`;
}

/** Runs the job on `size` shm ranks (worker threads). */
export function runShm(
  size: number,
  job: ParityJob,
  timeoutMs = 20_000,
): Promise<ShmRankOutcome<ParityReport>[]> {
  return launchThreads<ParityJob, ParityReport>(size, tsxBootstrap('shm-rank-worker.ts'), job, {
    eval: true,
    execArgv: ['--conditions=@webshard/source'],
    group: { timeoutMs },
  });
}

/**
 * The `webshard-run` bin of `@webshard/collectives`, from its source (as the other packages' tests
 * run it): the same code with or without a build. (Its build, present after `pnpm build` as in CI,
 * started the TypeScript ranks without the source condition's loader.)
 */
function webshardRun(): string[] {
  const root = dirname(require.resolve('@webshard/collectives/package.json'));
  return [
    '--conditions=@webshard/source',
    '--import',
    'tsx',
    join(root, 'src', 'cli', 'webshard-run.ts'),
  ];
}

/** Runs the job on `size` processes over `backend` through webshard-run; the reports by rank. */
export function runProcesses(
  size: number,
  backend: 'tcp' | 'ws',
  job: ParityJob,
): Promise<{
  exitCode: number | null;
  reports: ((ParityReport & { transport: string }) | null)[];
  output: string;
}> {
  return runRankScript<ParityReport & { transport: string }>(size, 'net-rank.ts', [
    backend,
    JSON.stringify(job),
  ]);
}

/**
 * Runs the rank script `file` (beside this one) with `args` on `size` processes through
 * webshard-run; each rank's report is the JSON after `REPORT ` on one line of its output.
 */
export function runRankScript<Report>(
  size: number,
  file: string,
  args: string[],
): Promise<{ exitCode: number | null; reports: (Report | null)[]; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      [
        ...webshardRun(),
        '--nproc-per-node',
        String(size),
        // Processes, not webshard-run's default on one node (threads over shm, where `backend`
        // would not be used): these tests are about tcp and ws between processes.
        '--ranks-as',
        'processes',
        join(here, file),
        ...args,
      ],
      {
        env: { ...process.env, NODE_OPTIONS: '--conditions=@webshard/source' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.on('exit', (exitCode) => {
      const reports: (Report | null)[] = Array.from({ length: size }, () => null);
      for (const line of output.split('\n')) {
        const match = /^\[rank (\d+)\] REPORT (.*)$/.exec(line);
        if (match) reports[Number(match[1])] = JSON.parse(match[2]!) as Report;
      }
      resolve({ exitCode, reports, output });
    });
  });
}
