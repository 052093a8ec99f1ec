// Starting the progress tests' ranks (kernel-rank.ts) as two webshard-run processes.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import type { KernelRankReport } from './kernel-rank.js';
import { rankLines, webshardRun } from './webshard-run.js';

const here = dirname(fileURLToPath(import.meta.url));

/**
 * Two processes over tcp (webshard-run), each running kernel-rank.ts with `args`; the launcher
 * must exit with `code` (0: every rank did).
 */
export async function runKernelRanks(
  args: string[],
  code = 0,
): Promise<{ reports: KernelRankReport[]; output: string }> {
  const run = await webshardRun([
    ...['--nproc-per-node', '2', '--ranks-as', 'processes'],
    join(here, 'kernel-rank.ts'),
    ...args,
  ]);
  expect(run.code, run.output).toBe(code);
  return { reports: rankLines<KernelRankReport>(run.stdout, 'REPORT'), output: run.output };
}
