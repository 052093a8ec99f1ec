// Starting the progress tests' ranks (kernel-rank.ts) as two webshard-run processes.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import type { KernelRankReport } from './kernel-rank.js';

const here = dirname(fileURLToPath(import.meta.url));
const collectives = dirname(
  createRequire(import.meta.url).resolve('@webshard/collectives/package.json'),
);
const cli = join(collectives, 'src', 'cli', 'webshard-run.ts');

/**
 * Two processes over tcp (webshard-run), each running kernel-rank.ts with `args`; the launcher
 * must exit with `code` (0: every rank did).
 */
export async function runKernelRanks(
  args: string[],
  code = 0,
): Promise<{ reports: KernelRankReport[]; output: string }> {
  const child = spawn(
    process.execPath,
    [
      '--conditions=@webshard/source',
      '--import',
      'tsx',
      cli,
      '--nproc-per-node',
      '2',
      '--ranks-as',
      'processes',
      join(here, 'kernel-rank.ts'),
      ...args,
    ],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NODE_OPTIONS: '--conditions=@webshard/source' },
    },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  const exited = await new Promise<number | null>((resolve) => child.on('close', resolve));
  expect(exited, output).toBe(code);
  const reports = output
    .split('\n')
    .filter((line) => line.includes('REPORT '))
    .map((line) => JSON.parse(line.slice(line.indexOf('REPORT ') + 7)) as KernelRankReport)
    .sort((a, b) => a.rank - b.rank);
  return { reports, output };
}
