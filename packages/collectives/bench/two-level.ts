// The two-level rows of `pnpm bench`: 2 simulated nodes on this machine, each a `webshard-run
// --nnodes 2 --node-rank K` process whose ranks are threads over shm, tcp between the two.
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../src/launcher/launcher.js';
import type { BenchOp, BenchPlan, BenchResult } from './plan.js';

const here = dirname(fileURLToPath(import.meta.url));

/** One variant of one op in the A/B rows, as rank 0 reports it. */
export interface AbResult {
  op: BenchOp;
  variant: 'staged' | 'slots';
  sizeMiB: number;
  /** Median over iterations of the slowest rank's time. */
  medianMs: number;
  /** Rank 0's node: its process's CPU time per op (median), ms. */
  cpuMs: number;
}
const cli = join(here, '..', 'src', 'cli', 'webshard-run.ts');

/**
 * Runs `plan` on 2 nodes of `world / 2` threads; rank 0's results. `slots`: the node's phases in
 * rounds through the arena's slots (`WEBSHARD_TWO_LEVEL_ROUNDS=1`, the schedule before staging),
 * to compare the two in one run.
 */
export async function runTwoLevel(
  world: number,
  plan: BenchPlan,
  slots = false,
): Promise<BenchResult[]> {
  return runTwoLevelScript<BenchResult>(world, 'two-level-rank.ts', plan, slots);
}

/**
 * The A/B rows: each op with staged node phases and with the slot schedule, interleaved
 * iteration by iteration (two-level-ab-rank.ts); rank 0's results.
 */
export function runTwoLevelAb(world: number, plan: BenchPlan): Promise<AbResult[]> {
  return runTwoLevelScript<AbResult>(world, 'two-level-ab-rank.ts', plan, false);
}

async function runTwoLevelScript<T>(
  world: number,
  script: string,
  plan: BenchPlan,
  slots: boolean,
): Promise<T[]> {
  const port = await freePort();
  const nodes = [0, 1].map((node) => {
    const child = spawn(
      process.execPath,
      [
        '--conditions=@webshard/source',
        '--import',
        'tsx',
        cli,
        ...['--nproc-per-node', String(world / 2), '--nnodes', '2', '--node-rank', String(node)],
        ...['--master-port', String(port), '--token', 'bench'],
        join(here, script),
        JSON.stringify(plan),
      ],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
        env: { ...process.env, ...(slots ? { WEBSHARD_TWO_LEVEL_ROUNDS: '1' } : {}) },
      },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    return new Promise<string>((resolve, reject) =>
      child.on('close', (code) =>
        code === 0 ? resolve(out) : reject(new Error(`two-level node ${node} exited ${code}`)),
      ),
    );
  });
  const outputs = await Promise.all(nodes);
  const mark = '[rank 0] @@results ';
  const line = outputs[0]!.split('\n').find((l) => l.startsWith(mark));
  if (line === undefined) throw new Error('two-level: rank 0 printed no results');
  return JSON.parse(line.slice(mark.length)) as T[];
}
