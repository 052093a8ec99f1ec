import { spawn, spawnSync } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isNativeWebGpuNoise } from '@webshard/collectives/node';
import { webGpuTestsEnabled } from '@webshard/tensor-core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/*
 * The bin as a user runs it (through tsx, as `pnpm webshard-train` does), in a directory of its
 * own. These spawns are the only ones in the suite; everything else calls `main` in process.
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

/** A WebGPU run of the bin short enough for a test: the MLP, 2 steps. */
const WEBGPU_RUN = [
  '--model',
  'mlp',
  '--backend',
  'webgpu',
  '--steps',
  '2',
  '--sample-length',
  '0',
];

describe.skipIf(!webGpuTestsEnabled())("the bin's stderr with WebGPU", () => {
  // [Note: quiet native stderr in the CLIs] in @webshard/collectives.
  it("prints none of Dawn's and Mesa's own lines, which WEBSHARD_DAWN_LOGS=1 shows", () => {
    const noisy = spawnCli(WEBGPU_RUN, { WEBSHARD_DAWN_LOGS: '1' });
    expect(noisy.status).toBe(0);
    // Without the filter the noise is there (else this test could not fail).
    expect(noisy.stderr.split('\n').filter(isNativeWebGpuNoise).length).toBeGreaterThan(0);
    const run = spawnCli(WEBGPU_RUN, {});
    expect(run.status).toBe(0);
    expect(run.stdout).toMatch(/trained 2 steps/);
    expect(run.stderr).toBe('');
  }, 120_000);

  it('still prints a real error, with its exit code', () => {
    const run = spawnCli([...WEBGPU_RUN, '--lr', '0'], {});
    expect(run.status).toBe(2);
    expect(run.stderr).toBe('webshard-train: --lr 0 is out of range (0, 10]\n');
  });

  it('passes SIGTERM on to the run and exits as it does (143)', async () => {
    const { INIT_CWD: _, ...rest } = process.env;
    const child = spawn(
      process.execPath,
      [TSX, '--conditions=@webshard/source', CLI, ...WEBGPU_RUN, '--steps', '100000'],
      { cwd: dir, env: rest, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stdout = '';
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk;
    });
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk;
        if (/step +1\//.test(stdout)) resolve();
      });
      child.once('close', () => reject(new Error(`exited before step 1: ${stderr}`)));
    });
    const exited = new Promise<number | null>((resolve) => child.once('close', resolve));
    child.kill('SIGTERM');
    expect(await exited).toBe(143);
    // One line from the run, which stopped after its step ([Note: interrupts]); no native noise.
    expect(stderr).toMatch(
      /^webshard-train: interrupted by SIGTERM after step \d+ of 100000; nothing saved \(--checkpoint-dir saves a checkpoint on an interrupt\)\n$/,
    );
  }, 120_000);
});
