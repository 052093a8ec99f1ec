import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { freePort } from '../launcher/launcher.js';

const here = dirname(fileURLToPath(import.meta.url));
const cli = join(here, 'webshard-run.ts');
const allReduce = join(here, '..', 'launcher', '__fixtures__', 'all-reduce.ts');

/** Runs the CLI with `env` on top of this process's; its exit code and output. */
async function runCli(args: string[], env: Record<string, string>) {
  const child = spawn(
    process.execPath,
    ['--conditions=@webshard/source', '--import', 'tsx', cli, ...args],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      // The ranks (processes) read sibling packages from source, as the tests do.
      env: { ...process.env, NODE_OPTIONS: '--conditions=@webshard/source', ...env },
    },
  );
  let out = '';
  let errors = '';
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    errors += chunk.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, out, errors };
}

describe('webshard-run under Slurm', () => {
  it("joins two launchers as two nodes from Slurm's variables alone", async () => {
    const port = String(await freePort());
    const slurm = (node: number) => ({
      SLURM_JOB_NODELIST: 'localhost,node[2-9]',
      SLURM_NNODES: '2',
      SLURM_NTASKS: '2',
      SLURM_NODEID: String(node),
      SLURM_PROCID: String(node),
      MASTER_PORT: port,
      WEBSHARD_TOKEN: 'slurm-job',
    });
    const runs = await Promise.all(
      [0, 1].map((node) => runCli(['--nproc-per-node', '2', allReduce], slurm(node))),
    );
    expect(
      runs.map((run) => run.code),
      runs.map((run) => run.errors).join('\n'),
    ).toEqual([0, 0]);
    expect(runs[1]!.out.trim().split('\n').sort()).toEqual([
      '[rank 2] rank 2 of 4 over shm+tcp: sum 10, count 4',
      '[rank 3] rank 3 of 4 over shm+tcp: sum 10, count 4',
    ]);
  });
});

describe('webshard-run refusals', () => {
  it('says why in one line and exits 2 when options conflict', async () => {
    const { code, out, errors } = await runCli(
      ['--nproc-per-node', '2', '--ranks-as', 'threads', '--no-node', allReduce],
      { WEBSHARD_TOKEN: 't' },
    );
    expect([code, out]).toEqual([2, '']);
    expect(errors).toBe(
      '[webshard-run] --no-node runs an executable, which cannot be a thread: use --ranks-as processes\n',
    );
  });
});
