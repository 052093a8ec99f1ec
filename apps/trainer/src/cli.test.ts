import { spawnSync } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/*
 * The bin as a user runs it (through tsx, as `pnpm webshard-train` does), in a directory of its
 * own. The two spawns are the only ones in the suite; everything else calls `main` in process.
 */
const ROOT = join(import.meta.dirname, '..', '..', '..');
const TSX = join(ROOT, 'node_modules', 'tsx', 'dist', 'cli.mjs');
const CLI = join(import.meta.dirname, 'cli.ts');

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'webshard-bin-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function spawnCli(args: string[], env: Record<string, string | undefined>) {
  const { INIT_CWD: _, ...rest } = process.env;
  return spawnSync(process.execPath, [TSX, '--conditions=@webshard/source', CLI, ...args], {
    cwd: dir,
    env: { ...rest, ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
}

describe('the webshard-train bin', () => {
  it('prints the usage for --help after the -- that pnpm passes through', () => {
    const run = spawnCli(['--', '--help'], {});
    expect(run.status).toBe(0);
    expect(run.stdout).toMatch(/^Usage: webshard-train/);
  });

  it("reads relative paths against INIT_CWD (pnpm's caller directory), else its own cwd; exits 2", async () => {
    const own = spawnCli(['--data', 'missing.txt', '--save', 'm.safetensors'], {});
    expect(own.status).toBe(2);
    expect(own.stderr).toBe(`webshard-train: --data ${join(dir, 'missing.txt')}: no such file\n`);
    const caller = spawnCli(['--data', 'missing.txt'], { INIT_CWD: '/somewhere/else' });
    expect(caller.status).toBe(2);
    expect(caller.stderr).toBe(
      'webshard-train: --data /somewhere/else/missing.txt: no such file\n',
    );
    expect(await readdir(dir)).toEqual([]);
  });
});
