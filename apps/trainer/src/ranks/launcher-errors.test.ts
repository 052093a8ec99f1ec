import { spawn } from 'node:child_process';
import { type AddressInfo, createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const cli = join(dirname(fileURLToPath(import.meta.url)), '..', 'cli.ts');

const ARGS = ['--strategy', 'ddp', '--world-size', '2', '--transport', 'tcp', '--steps', '1'];

/** Runs webshard-train as a launched rank with `env`; its exit code and stderr lines. */
async function runRank(env: Record<string, string>) {
  const child = spawn(
    process.execPath,
    ['--conditions=@webshard/source', '--import', 'tsx', cli, ...ARGS],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } },
  );
  let errors = '';
  child.stderr.on('data', (chunk: Buffer) => {
    errors += chunk.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, lines: errors.trim().split('\n') };
}

/** #33 item 6: what the launcher's environment gets wrong is a usage error, one line, exit 2. */
describe('a launched rank whose environment is wrong', () => {
  it('RANK=3 WORLD_SIZE=2 exits 2 naming both variables', async () => {
    expect(await runRank({ RANK: '3', WORLD_SIZE: '2', MASTER_PORT: '1' })).toEqual({
      code: 2,
      lines: [
        'webshard-train: [rendezvous] RANK=3 is outside [0, 2) (WORLD_SIZE=2): ranks run from 0 to the world size - 1',
      ],
    });
  }, 60_000);

  it('a busy MASTER_PORT exits 2 naming the port, not an EADDRINUSE stack', async () => {
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const port = (holder.address() as AddressInfo).port;
    try {
      expect(await runRank({ RANK: '0', WORLD_SIZE: '2', MASTER_PORT: String(port) })).toEqual({
        code: 2,
        lines: [
          `webshard-train: [rendezvous] rank 0: rank 0's store cannot listen on 127.0.0.1:${port} (MASTER_PORT or masterPort): the port is in use by another process (another job, or an earlier run still holding it); give every rank the same free port, or stop what holds it`,
        ],
      });
    } finally {
      holder.close();
    }
  }, 60_000);
});
