import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { connectBrowserRank } from '../browser-rank.js';
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

describe('webshard-run --browser-ranks', () => {
  // [Note: browser ranks in webshard-run]. The tab is played by connectBrowserRank in this
  // process (it dials only, as a page does); apps/trainer's browser-ranks test runs real tabs.
  it('starts the Node ranks of a world with one more rank, prints the join URL and token, and a tab completes it', async () => {
    const child = spawn(
      process.execPath,
      [
        '--conditions=@webshard/source',
        '--import',
        'tsx',
        cli,
        '--nproc-per-node',
        '2',
        '--browser-ranks',
        '1',
        allReduce,
        'ws',
      ],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, NODE_OPTIONS: '--conditions=@webshard/source' },
      },
    );
    let out = '';
    let errors = '';
    child.stderr.on('data', (chunk: Buffer) => {
      errors += chunk.toString();
    });
    const closed = new Promise<number | null>((resolve) => child.on('close', resolve));
    const printed = await new Promise<{ url: string; token: string }>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        const url = /url: +(\S+)/.exec(out)?.[1];
        const token = /token: +(\S+)/.exec(out)?.[1];
        if (url !== undefined && token !== undefined) resolve({ url, token });
      });
      void closed.then(() => reject(new Error(`exited before printing: ${errors}`)));
    });
    expect(out).toMatch(
      /^\[webshard-run\] browser ranks: 1 page\(s\) join as rank 2 of 3 with connectBrowserRank\(\{ url, token \}\)/,
    );
    expect(printed.url).toMatch(/^ws:\/\/127\.0\.0\.1:\d+\/\?worldSize=3&ranks=2-2$/);
    expect(printed.token).toMatch(/^[0-9a-f]{48}$/);
    const tab = await connectBrowserRank({ ...printed, timeoutMs: 30_000 });
    expect([tab.rank, tab.worldSize]).toEqual([2, 3]);
    const data = Float32Array.from([tab.rank + 1, 1]);
    await tab.group.allReduce(data).wait();
    await tab.group.close();
    expect(Array.from(data)).toEqual([6, 3]);
    expect(await closed).toBe(0);
    expect(errors).toBe('');
    expect(out).toContain('[rank 0] rank 0 of 3 over ws: sum 6, count 3');
    expect(out).toContain('[rank 1] rank 1 of 3 over ws: sum 6, count 3');
  }, 90_000);

  it('refuses ranks as threads and several nodes by name, exit 2', async () => {
    const threads = await runCli(
      ['--nproc-per-node', '1', '--browser-ranks', '1', '--ranks-as', 'threads', allReduce],
      {},
    );
    expect([threads.code, threads.out]).toEqual([2, '']);
    expect(threads.errors).toBe(
      '[webshard-run] --browser-ranks: tabs join over ws, and ranks as threads share one shm world they cannot join: use --ranks-as processes\n',
    );
    const nodes = await runCli(
      ['--nproc-per-node', '1', '--nnodes', '2', '--browser-ranks', '1', allReduce],
      { WEBSHARD_TOKEN: 't' },
    );
    expect([nodes.code, nodes.out]).toEqual([2, '']);
    expect(nodes.errors).toBe(
      '[webshard-run] --browser-ranks: one node only (the tabs are the last ranks of one flat ws world)\n',
    );
  }, 60_000);
});
