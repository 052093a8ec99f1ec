import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { BenchOp } from './plan.js';

const PYTHON = '/usr/bin/python3';

/** One gloo measurement: busbw in MB/s, keyed by our op name and size. */
export type GlooResults = Map<string, number>;

export const glooKey = (op: BenchOp | 'all_reduce', sizeMiB: number) => `${op}/${sizeMiB}`;

/** Why the gloo peer cannot run here, or null when it can. */
export function glooUnavailable(repoRoot: string): string | null {
  const script = join(repoRoot, '..', 'shared', 'peers', 'gloo_bench.py');
  if (!existsSync(script)) return `${script} not found`;
  if (!existsSync(PYTHON)) return `${PYTHON} not found`;
  const probe = spawnSync(PYTHON, ['-c', 'import torch.distributed'], { stdio: 'ignore' });
  return probe.status === 0 ? null : `${PYTHON} has no torch (apt-get install -y python3-torch)`;
}

const OP_NAMES: Record<string, BenchOp> = {
  all_reduce: 'allReduce',
  all_gather_into_tensor: 'allGather',
  broadcast: 'broadcast',
};

/**
 * Runs ../shared/peers/gloo_bench.py (relative to the repository root) for one world size and
 * returns its busbw per op and size. gloo 1.13 has no reduce-scatter; all_gather falls back to
 * the list API when all_gather_into_tensor is missing.
 */
export async function runGloo(
  repoRoot: string,
  world: number,
  port: number,
  sizesMiB: readonly number[],
): Promise<GlooResults> {
  const script = join(repoRoot, '..', 'shared', 'peers', 'gloo_bench.py');
  // The script also saves its rows beside itself and fails at the very end without this folder.
  try {
    mkdirSync(join(repoRoot, '..', 'shared', 'peers', 'results'), { recursive: true });
  } catch {
    // Read-only: the rows printed on stdout are all this benchmark uses.
  }
  const child = spawn(
    PYTHON,
    [script, String(world), String(port), '--sizes', sizesMiB.join(',')],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, OMP_NUM_THREADS: '1' },
    },
  );
  let out = '';
  let err = '';
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  const results: GlooResults = new Map();
  const listGather = new Map<number, number>();
  for (const line of out.split('\n')) {
    if (!line.startsWith('{')) continue;
    const row = JSON.parse(line) as { op: string; sizeMiB: number; busbwMBps?: number };
    if (row.busbwMBps === undefined) continue;
    if (row.op === 'all_gather(list)') listGather.set(row.sizeMiB, row.busbwMBps);
    const op = OP_NAMES[row.op];
    if (op !== undefined) results.set(glooKey(op, row.sizeMiB), row.busbwMBps);
  }
  for (const [size, busbw] of listGather) {
    if (!results.has(glooKey('allGather', size))) results.set(glooKey('allGather', size), busbw);
  }
  if (results.size === 0) throw new Error(`gloo_bench.py exited ${code}:\n${err.slice(-2000)}`);
  return results;
}
