// The two-level rows of `pnpm bench`: 2 simulated nodes on this machine, each a `webshard-run
// --nnodes 2 --node-rank K` process whose ranks are threads over shm, tcp between the two.
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../src/launcher/launcher.js';
import type { BenchPlan, BenchResult } from './plan.js';

const here = dirname(fileURLToPath(import.meta.url));
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
        join(here, 'two-level-rank.ts'),
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
  return JSON.parse(line.slice(mark.length)) as BenchResult[];
}
