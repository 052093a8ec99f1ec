import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createBackend, NoAdapterError } from '@webshard/tensor-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DUPLICATE_MS, type SignalHost, StopFlag, stopOnSignals } from './interrupt.js';
import { main } from './run-cli.js';
import { TINY } from './test-support/cli.js';

const CLI = join(import.meta.dirname, 'cli.ts');
let out: string;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), 'webshard-interrupt-'));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

/** A process stand-in: signals are delivered by `send`, the clock is set by hand. */
function fakeHost() {
  const listeners = new Map<string, () => void>();
  const killed: string[] = [];
  let clock = 0;
  const host: SignalHost = {
    on: (signal, listener) => listeners.set(signal, listener),
    off: (signal) => listeners.delete(signal),
    killSelf: (signal) => killed.push(signal),
    now: () => clock,
  };
  return {
    host,
    killed,
    listening: () => [...listeners.keys()],
    send: (signal: 'SIGINT' | 'SIGTERM', at: number) => {
      clock = at;
      listeners.get(signal)?.();
    },
  };
}

describe('stopOnSignals', () => {
  it('a first signal only asks to stop; copies of it within moments count once; a second ends the process', () => {
    const fake = fakeHost();
    let cleaned = 0;
    const { flag } = stopOnSignals(() => cleaned++, fake.host);
    expect(flag.signal).toBeNull();
    fake.send('SIGTERM', 1000);
    fake.send('SIGINT', 1000 + DUPLICATE_MS - 1);
    expect([flag.signal, fake.killed, cleaned]).toEqual(['SIGTERM', [], 0]);
    fake.send('SIGINT', 1000 + DUPLICATE_MS + 1);
    expect([fake.killed, cleaned, fake.listening()]).toEqual([['SIGINT'], 1, []]);
  });

  it('is read by any thread holding its buffer', () => {
    const flag = new StopFlag();
    const seen = new StopFlag(flag.buffer);
    flag.request('SIGINT');
    flag.request('SIGTERM');
    expect(seen.signal).toBe('SIGINT');
  });
});

describe('ranks of a job stop together', () => {
  it('a signal while the job decides its backend starts no rank: exit 143, one line', async () => {
    const stop = new StopFlag();
    stop.request('SIGTERM');
    let stdout = '';
    let stderr = '';
    const outcome = await main(
      [...TINY.filter((f, i) => f !== '--backend' && TINY[i - 1] !== '--backend')].concat([
        '--strategy',
        'ddp',
        '--world-size',
        '2',
        '--transport',
        'tcp',
      ]),
      {
        stdout: (text) => {
          stdout += text;
        },
        stderr: (text) => {
          stderr += text;
        },
        isTTY: false,
        cwd: out,
        stop,
      },
    );
    expect(outcome.exitCode).toBe(143);
    expect(stderr).toBe(
      'webshard-train: interrupted by SIGTERM before the first step; nothing saved (--checkpoint-dir saves a checkpoint on an interrupt)\n',
    );
    expect(stdout).not.toMatch(/^step|\[rank/m);
  }, 60_000);

  it('fsdp on 2 worker threads: after the same step, a checkpoint of it, exit 130, one line', async () => {
    const dir = join(out, 'shm-ckpt');
    const log = join(out, 'shm.jsonl');
    const stop = new StopFlag();
    let stdout = '';
    let stderr = '';
    const outcome = await main(
      [
        ...TINY,
        ...['--steps', '100000', '--strategy', 'fsdp', '--world-size', '2', '--transport', 'shm'],
        ...['--checkpoint-every', '100000', '--checkpoint-dir', dir, '--log-jsonl', log],
      ],
      {
        stdout: (text) => {
          stdout += text;
          if (/^step\s+3\//m.test(stdout)) stop.request('SIGINT');
        },
        stderr: (text) => {
          stderr += text;
        },
        isTTY: false,
        cwd: out,
        stop,
      },
    );
    expect(outcome.exitCode).toBe(130);
    const steps = (await readFile(log, 'utf8')).trim().split('\n').length;
    expect(steps).toBeGreaterThanOrEqual(3);
    const name = `step-${String(steps).padStart(6, '0')}`;
    expect(stderr).toBe(
      `webshard-train: interrupted by SIGINT after step ${steps} of 100000; checkpoint saved: ${join(dir, name)} (--resume to go on)\n`,
    );
    expect((await readFile(join(dir, 'latest'), 'utf8')).trim()).toBe(name);
  }, 60_000);
});

/** `webshard-train` as a user runs it: its own process, its stderr filter included. */
function startCli(args: readonly string[]): {
  child: ChildProcess;
  done: Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string }>;
} {
  const child = spawn(
    process.execPath,
    ['--conditions=@webshard/source', '--import', 'tsx', CLI, ...args],
    // In the package: `--import tsx` resolves from the working directory.
    {
      cwd: import.meta.dirname,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, INIT_CWD: undefined, WEBSHARD_STDERR_FILTERED: undefined },
    },
  );
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const done = new Promise<{
    code: number | null;
    signal: string | null;
    stdout: string;
    stderr: string;
  }>((resolve) => child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr })));
  return { child, done };
}

/** Resolves once `child` has printed `pattern` on stdout; rejects if it ends before. */
function printed(child: ChildProcess, pattern: RegExp): Promise<void> {
  let text = '';
  let errors = '';
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      if (pattern.test(text)) resolve();
    });
    child.stderr!.on('data', (chunk: Buffer) => {
      errors += chunk.toString();
    });
    child.on('close', (code) => reject(new Error(`exited ${code} first: ${errors}`)));
  });
}

describe('ranks in processes', () => {
  it('fsdp on 2 processes over tcp: the launcher passes SIGINT on, both stop after the same step, a checkpoint of it, 130', async () => {
    const dir = join(out, 'tcp-ckpt');
    const { child, done } = startCli([
      ...[...TINY, '--steps', '100000', '--strategy', 'fsdp', '--world-size', '2'],
      ...['--transport', 'tcp', '--checkpoint-every', '100000', '--checkpoint-dir', dir],
    ]);
    await printed(child, /^\[rank 0\] step\s+3\//m);
    child.kill('SIGINT');
    const { code, stderr, stdout } = await done;
    expect(code).toBe(130);
    const last = Number([...stdout.matchAll(/^\[rank 0\] step\s+(\d+)\//gm)].at(-1)![1]);
    const name = `step-${String(last).padStart(6, '0')}`;
    // Rank 0 says it once; rank 1 stopped with it, silently.
    expect(stderr).toBe(
      `[rank 0] webshard-train: interrupted by SIGINT after step ${last} of 100000; checkpoint saved: ${join(dir, name)} (--resume to go on)\n`,
    );
    expect((await readFile(join(dir, 'latest'), 'utf8')).trim()).toBe(name);
  }, 60_000);
});

const webgpu = await createBackend({ kind: 'webgpu' }).then(
  (backend) => {
    backend.dispose();
    return true;
  },
  (error: unknown) => {
    if (NoAdapterError.isInstance(error) && process.env.WEBSHARD_REQUIRE_WEBGPU !== '1') {
      return false;
    }
    throw error;
  },
);

describe.runIf(webgpu)('an interrupt during a WebGPU step', () => {
  const gpuFlags = [...TINY, '--backend', 'webgpu', '--steps', '100000'];

  it('SIGINT: stops after the step, saves a checkpoint, releases the device, exits 130 with one line', async () => {
    const dir = join(out, 'gpu-ckpt');
    const { child, done } = startCli([
      ...gpuFlags,
      ...['--checkpoint-every', '100000', '--checkpoint-dir', dir],
    ]);
    await printed(child, /^step\s+3\//m);
    child.kill('SIGINT');
    const { code, stderr, stdout } = await done;
    expect(stderr).not.toMatch(/FATAL|napi/);
    expect(code).toBe(130);
    const last = Number([...stdout.matchAll(/^step\s+(\d+)\//gm)].at(-1)![1]);
    const name = `step-${String(last).padStart(6, '0')}`;
    expect(stderr).toBe(
      `webshard-train: interrupted by SIGINT after step ${last} of 100000; checkpoint saved: ${join(dir, name)} (--resume to go on)\n`,
    );
    expect((await readFile(join(dir, 'latest'), 'utf8')).trim()).toBe(name);
  }, 60_000);

  it('SIGTERM: exits 143 with one line; a second signal ends it at once', async () => {
    const first = startCli(gpuFlags);
    await printed(first.child, /^step\s+2\//m);
    first.child.kill('SIGTERM');
    const stopped = await first.done;
    expect(stopped.code).toBe(143);
    expect(stopped.stderr).toMatch(
      /^webshard-train: interrupted by SIGTERM after step \d+ of 100000; nothing saved \(--checkpoint-dir saves a checkpoint on an interrupt\)\n$/,
    );

    const twice = startCli(gpuFlags);
    await printed(twice.child, /^step\s+2\//m);
    twice.child.kill('SIGINT');
    await new Promise((resolve) => setTimeout(resolve, DUPLICATE_MS + 100));
    twice.child.kill('SIGINT');
    const killed = await twice.done;
    expect(killed.stderr).not.toMatch(/FATAL|napi/);
    // Killed by the signal, or (had the step ended first) stopped by it: never a crash.
    expect([killed.signal, killed.code]).toContainEqual(killed.signal === null ? 130 : 'SIGINT');
  }, 60_000);
});
