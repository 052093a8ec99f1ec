import { spawn } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { findTorchPeer, type TorchBuild } from '@webshard/bench';
import type { BenchOp } from './plan.js';

/** One gloo measurement: busbw in MB/s, keyed by our op name and size. */
export type GlooResults = Map<string, number>;

export const glooKey = (op: BenchOp | 'all_reduce', sizeMiB: number) => `${op}/${sizeMiB}`;

/** The PyTorch that runs gloo, and its label (`PyTorch 2.13.0+cpu (MKL, oneDNN)`). */
export interface GlooPeer {
  build: TorchBuild;
  label: string;
}

/**
 * The gloo peer, or why it cannot run here: the benchmarks' PyTorch ([Note: honest PyTorch
 * peers] in tooling/bench), where a reference-BLAS build still serves (gloo never calls BLAS).
 */
export function glooPeer(repoRoot: string): GlooPeer | { skipped: string } {
  const script = join(repoRoot, '..', 'shared', 'peers', 'gloo_bench.py');
  if (!existsSync(script)) return { skipped: `${script} not found` };
  const peer = findTorchPeer(repoRoot, 'collectives');
  return peer;
}

const OP_NAMES: Record<string, BenchOp> = {
  all_reduce: 'allReduce',
  all_gather_into_tensor: 'allGather',
  // gloo has it since PyTorch 2 (1.13 answered that it is not supported).
  reduce_scatter_tensor: 'reduceScatter',
  broadcast: 'broadcast',
};

/**
 * Runs ../shared/peers/gloo_bench.py (relative to the repository root) with the peer's Python for
 * one world size and returns its busbw per op and size. gloo 1.13 has no reduce-scatter (no row
 * then); all_gather falls back to the list API when all_gather_into_tensor is missing.
 */
export async function runGloo(
  peer: GlooPeer,
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
    peer.build.python,
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
