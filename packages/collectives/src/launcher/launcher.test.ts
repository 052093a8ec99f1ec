import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { ArgumentError } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { freePort, LinePrefixer, launch } from './launcher.js';

const here = dirname(fileURLToPath(import.meta.url));
const fixture = (name: string) => join(here, '__fixtures__', name);

function capture() {
  const stream = new PassThrough();
  let text = '';
  stream.on('data', (chunk: Buffer) => {
    text += chunk.toString();
  });
  return { stream, text: () => text };
}

describe('launch', () => {
  it('starts the ranks with torchrun variables and prefixes every line', async () => {
    const out = capture();
    const err = capture();
    const result = await launch({
      nprocPerNode: 3,
      script: fixture('print-env.mjs'),
      args: ['a', 'b'],
      stdout: out.stream,
      stderr: err.stream,
      forwardSignals: false,
    });
    expect(result).toEqual({ exitCode: 0, rankExitCodes: [0, 0, 0] });
    const lines = out.text().trim().split('\n').sort();
    expect(lines).toEqual([
      '[rank 0] env 0 0 3 127.0.0.1 true 48 a,b',
      '[rank 0] second line',
      '[rank 1] env 1 1 3 127.0.0.1 true 48 a,b',
      '[rank 1] second line',
      '[rank 2] env 2 2 3 127.0.0.1 true 48 a,b',
      '[rank 2] second line',
    ]);
    expect(err.text().trim().split('\n').sort()).toEqual([
      '[rank 0] err 0',
      '[rank 1] err 1',
      '[rank 2] err 2',
    ]);
  });

  it('numbers ranks by node on a multi-node launch', async () => {
    const out = capture();
    const result = await launch({
      nprocPerNode: 2,
      nnodes: 3,
      nodeRank: 2,
      masterPort: 1234,
      token: 'shared',
      script: fixture('print-env.mjs'),
      stdout: out.stream,
      stderr: new PassThrough(),
      forwardSignals: false,
    });
    expect(result.exitCode).toBe(0);
    const envLines = out
      .text()
      .split('\n')
      .filter((line) => line.includes(' env '));
    expect(envLines.sort()).toEqual([
      '[rank 4] env 4 0 6 127.0.0.1 true 6 ',
      '[rank 5] env 5 1 6 127.0.0.1 true 6 ',
    ]);
  });

  it('exits with the failed rank code and stops the other ranks', async () => {
    const result = await launch({
      nprocPerNode: 3,
      script: fixture('rank1-exits-3.mjs'),
      stdout: new PassThrough(),
      stderr: new PassThrough(),
      forwardSignals: false,
    });
    expect(result).toEqual({ exitCode: 3, failedRank: 1, rankExitCodes: [143, 3, 143] });
  });

  it('escalates to SIGKILL for a rank that ignores SIGTERM', async () => {
    const out = capture();
    const dir = mkdtempSync(join(tmpdir(), 'webshard-run-'));
    try {
      const result = await launch({
        nprocPerNode: 2,
        script: fixture('ignore-sigterm.mjs'),
        args: [dir],
        graceMs: 200,
        stdout: out.stream,
        stderr: new PassThrough(),
        forwardSignals: false,
      });
      expect(result).toEqual({ exitCode: 5, failedRank: 1, rankExitCodes: [137, 5] });
      expect(out.text()).toContain('[rank 0] ignoring SIGTERM');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses several nodes without a shared token', async () => {
    const saved = process.env.WEBSHARD_TOKEN;
    delete process.env.WEBSHARD_TOKEN;
    try {
      await expect(launch({ nprocPerNode: 1, nnodes: 2, script: 'x.mjs' })).rejects.toThrow(
        new ArgumentError(
          'webshard-run',
          'several nodes need a shared join token: pass --token or set WEBSHARD_TOKEN on every node',
        ),
      );
    } finally {
      if (saved !== undefined) process.env.WEBSHARD_TOKEN = saved;
    }
  });
});

describe('launch with initProcessGroup', () => {
  // The ranks read sibling packages from source, as the tests do.
  const env = { NODE_OPTIONS: '--conditions=@webshard/source' };

  it('runs a TypeScript script whose ranks all-reduce over tcp', async () => {
    const out = capture();
    const result = await launch({
      nprocPerNode: 3,
      script: fixture('all-reduce.ts'),
      args: ['tcp'],
      env,
      stdout: out.stream,
      stderr: new PassThrough(),
      forwardSignals: false,
    });
    expect(result.exitCode).toBe(0);
    expect(out.text().trim().split('\n').sort()).toEqual([
      '[rank 0] rank 0 of 3 over tcp: sum 6, count 3',
      '[rank 1] rank 1 of 3 over tcp: sum 6, count 3',
      '[rank 2] rank 2 of 3 over tcp: sum 6, count 3',
    ]);
  });

  it('joins two launches as two nodes of one ws world', async () => {
    const masterPort = await freePort();
    const outs = [capture(), capture()];
    const results = await Promise.all(
      [0, 1].map((nodeRank) =>
        launch({
          nprocPerNode: 2,
          nnodes: 2,
          nodeRank,
          masterPort,
          token: 'two-nodes',
          script: fixture('all-reduce.ts'),
          args: ['ws'],
          env,
          stdout: outs[nodeRank]!.stream,
          stderr: new PassThrough(),
          forwardSignals: false,
        }),
      ),
    );
    expect(results.map((r) => r.exitCode)).toEqual([0, 0]);
    expect(outs[1]!.text().trim().split('\n').sort()).toEqual([
      '[rank 2] rank 2 of 4 over ws: sum 10, count 4',
      '[rank 3] rank 3 of 4 over ws: sum 10, count 4',
    ]);
    expect(outs[0]!.text()).toContain('[rank 0] rank 0 of 4 over ws: sum 10, count 4');
  });
});

describe('launch with ranks as threads', () => {
  // Threads take Node flags from `execArgv`: the source condition lets them read sibling packages.
  const execArgv = ['--conditions=@webshard/source'];
  const quiet = { stderr: new PassThrough(), forwardSignals: false, execArgv } as const;

  for (const size of [2, 4]) {
    it(`runs the same all-reduce script as ${size} threads over shm, saying once that its backend is not used`, async () => {
      const out = capture();
      const err = capture();
      const result = await launch({
        nprocPerNode: size,
        ranksAs: 'threads',
        script: fixture('all-reduce.ts'),
        args: ['tcp'],
        stdout: out.stream,
        ...quiet,
        stderr: err.stream,
      });
      expect(result).toEqual({ exitCode: 0, rankExitCodes: new Array(size).fill(0) });
      // The script asks for tcp: local rank 0 warns, once for the node.
      const warnings = err
        .text()
        .split('\n')
        .filter((line) => line.includes('WebshardWarning'));
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatch(
        /^\[rank 0\] \(node:\d+\) \[WEBSHARD_BACKEND_NOT_USED\] WebshardWarning: /,
      );
      expect(warnings[0]).toContain(
        `initProcessGroup: backend 'tcp' is not used: webshard-run started this node's ${size} ranks as threads of one process, which run over shm; start them with --ranks-as processes to run over tcp`,
      );
      const sum = (size * (size + 1)) / 2;
      expect(out.text().trim().split('\n').sort()).toEqual(
        Array.from(
          { length: size },
          (_, r) => `[rank ${r}] rank ${r} of ${size} over shm: sum ${sum}, count ${size}`,
        ),
      );
    });
  }

  it('gives threads the environment and arguments processes get', async () => {
    const run = async (ranksAs: 'threads' | 'processes') => {
      const out = capture();
      const err = capture();
      const result = await launch({
        nprocPerNode: 3,
        ranksAs,
        script: fixture('print-env.mjs'),
        args: ['a', 'b'],
        stdout: out.stream,
        stderr: err.stream,
        forwardSignals: false,
      });
      expect(result.exitCode).toBe(0);
      return {
        out: out.text().trim().split('\n').sort(),
        err: err.text().trim().split('\n').sort(),
      };
    };
    const threads = await run('threads');
    expect(threads).toEqual(await run('processes'));
    expect(threads.out).toContain('[rank 2] env 2 2 3 127.0.0.1 true 48 a,b');
  });

  it('names a thread that throws: the others fail at once and the launch exits with it', async () => {
    const out = capture();
    const err = capture();
    const result = await launch({
      nprocPerNode: 3,
      ranksAs: 'threads',
      script: fixture('rank1-throws.ts'),
      stdout: out.stream,
      ...quiet,
      stderr: err.stream,
    });
    expect(result).toEqual({ exitCode: 1, failedRank: 1, rankExitCodes: [1, 1, 1] });
    expect(err.text()).toContain('[rank 1] RangeError: rank 1 gives up');
    const lines = out.text().trim().split('\n').sort();
    expect(lines).toHaveLength(2);
    for (const [index, rank] of [0, 2].entries()) {
      expect(lines[index]).toMatch(
        new RegExp(
          `^\\[rank ${rank}\\] \\w+Error: .*rank 1's thread threw RangeError: rank 1 gives up`,
        ),
      );
    }
  });

  it('fails the others at once when a thread exits without closing its group', async () => {
    const out = capture();
    const result = await launch({
      nprocPerNode: 3,
      ranksAs: 'threads',
      script: fixture('rank1-leaves.ts'),
      stdout: out.stream,
      ...quiet,
    });
    expect(result.rankExitCodes).toEqual([1, 0, 1]);
    const lines = out.text().trim().split('\n').sort();
    expect(lines).toHaveLength(2);
    for (const [index, rank] of [0, 2].entries()) {
      expect(lines[index]).toMatch(
        new RegExp(
          `^\\[rank ${rank}\\] \\w+Error: .*rank 1's thread exited without closing its group`,
        ),
      );
    }
  });

  it('refuses a thread rank another rank or size, and a second join', async () => {
    const out = capture();
    const result = await launch({
      nprocPerNode: 2,
      ranksAs: 'threads',
      script: fixture('join-wrong.ts'),
      stdout: out.stream,
      ...quiet,
    });
    expect(result.exitCode).toBe(0);
    expect(
      out
        .text()
        .split('\n')
        .filter((line) => line.startsWith('[rank 1]')),
    ).toEqual([
      '[rank 1] [initProcessGroup] rank 7 was given, but webshard-run started this thread as rank 1 (rank 1 of 2)',
      '[rank 1] [initProcessGroup] worldSize 3 was given, but webshard-run started this thread as worldSize 2 (rank 1 of 2)',
      "[rank 1] [initProcessGroup] rank 1's thread already joined its shared-memory world: call initProcessGroup once per rank",
    ]);
  });

  it('stops the other threads when one exits non-zero', async () => {
    const result = await launch({
      nprocPerNode: 3,
      ranksAs: 'threads',
      script: fixture('rank1-exits-3.mjs'),
      graceMs: 200,
      stdout: new PassThrough(),
      ...quiet,
    });
    expect(result).toEqual({ exitCode: 3, failedRank: 1, rankExitCodes: [1, 3, 1] });
  });

  it('refuses threads for executables', async () => {
    await expect(
      launch({ nprocPerNode: 2, ranksAs: 'threads', noNode: true, script: 'x' }),
    ).rejects.toThrow(
      '[webshard-run] --no-node runs an executable, which cannot be a thread: use --ranks-as processes',
    );
  });
});

describe('webshard-run', () => {
  const cli = join(here, '..', 'cli', 'webshard-run.ts');
  // The source condition lets the CLI run from a fresh clone, before any build.
  const spawnCli = (args: string[]) =>
    spawn(process.execPath, ['--conditions=@webshard/source', '--import', 'tsx', cli, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });

  it('stops the other ranks when one exits non-zero and exits with its code', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'webshard-run-'));
    try {
      const child = spawnCli([
        '--nproc-per-node',
        '3',
        '--ranks-as',
        'processes',
        '--grace-ms',
        '10000',
        fixture('fail-when-peers-ready.mjs'),
        dir,
      ]);
      let out = '';
      let errors = '';
      child.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString();
      });
      child.stderr.on('data', (chunk: Buffer) => {
        errors += chunk.toString();
      });
      const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
      expect(code, errors).toBe(7);
      expect(errors).toContain(
        '[webshard-run] rank 1 failed with exit code 7; stopped the other ranks',
      );
      // The others got SIGTERM (well within the grace period) and are gone.
      expect(out.trim().split('\n').sort()).toEqual([
        '[rank 0] got SIGTERM',
        '[rank 1] failing',
        '[rank 2] got SIGTERM',
      ]);
      for (const rank of [0, 2]) {
        const pid = Number(readFileSync(join(dir, `ready-${rank}`), 'utf8'));
        expect(() => process.kill(pid, 0), `rank ${rank} (pid ${pid})`).toThrow(/ESRCH/);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('forwards SIGTERM to the ranks and exits 143', async () => {
    const child = spawnCli([
      '--nproc-per-node',
      '2',
      '--ranks-as',
      'processes',
      fixture('wait-for-signal.mjs'),
    ]);
    let text = '';
    let errors = '';
    child.stderr.on('data', (chunk: Buffer) => {
      errors += chunk.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    const ready = new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        text += chunk.toString();
        if (text.includes('[rank 0] ready') && text.includes('[rank 1] ready')) resolve();
      });
      // A launcher that dies before its ranks are ready fails the test now, with its stderr.
      void exited.then((code) => reject(new Error(`webshard-run exited ${code}: ${errors}`)));
    });
    await ready;
    child.kill('SIGTERM');
    expect(await exited).toBe(143);
    expect(text).toContain('[rank 0] got SIGTERM');
    expect(text).toContain('[rank 1] got SIGTERM');
  });
});

describe('webshard-run and an interrupt', () => {
  const cli = join(here, '..', 'cli', 'webshard-run.ts');
  it('passes SIGINT on once (copies within moments count once) and waits for the ranks past its grace', async () => {
    const child = spawn(
      process.execPath,
      [
        ...['--conditions=@webshard/source', '--import', 'tsx', cli],
        ...['--nproc-per-node', '2', '--ranks-as', 'processes', '--grace-ms', '200'],
        fixture('stop-at-safe-point.mjs'),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let text = '';
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    await new Promise<void>((resolve) => {
      child.stdout.on('data', (chunk: Buffer) => {
        text += chunk.toString();
        if (text.includes('[rank 0] ready') && text.includes('[rank 1] ready')) resolve();
      });
    });
    // One Ctrl-C as a terminal delivers it to the launcher's process group: here, twice at once.
    child.kill('SIGINT');
    child.kill('SIGINT');
    expect(await exited).toBe(130);
    for (const rank of [0, 1]) {
      expect(text).toContain(`[rank ${rank}] got SIGINT 1`);
      expect(text).toContain(`[rank ${rank}] stopped at a safe point`);
      expect(text).not.toContain(`[rank ${rank}] got SIGINT 2`);
    }
  });
});

describe('webshard-run with ranks as threads (its default on one node)', () => {
  const cli = join(here, '..', 'cli', 'webshard-run.ts');
  const runCli = async (args: string[]) => {
    const child = spawn(
      process.execPath,
      ['--conditions=@webshard/source', '--import', 'tsx', cli, ...args],
      { stdio: ['ignore', 'pipe', 'pipe'] },
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
  };

  it('runs an unchanged initProcessGroup script over shm', async () => {
    const { code, out, errors } = await runCli(['--nproc-per-node', '2', fixture('all-reduce.ts')]);
    expect(code, errors).toBe(0);
    expect(out.trim().split('\n').sort()).toEqual([
      '[rank 0] rank 0 of 2 over shm: sum 3, count 2',
      '[rank 1] rank 1 of 2 over shm: sum 3, count 2',
    ]);
    // No backend asked for, none ignored: nothing to warn about.
    expect(errors).not.toContain('WebshardWarning');
  });

  it('exits non-zero naming the thread that threw', async () => {
    const { code, errors } = await runCli(['--nproc-per-node', '2', fixture('rank1-throws.ts')]);
    expect(code).toBe(1);
    expect(errors).toContain('[rank 1] RangeError: rank 1 gives up');
    expect(errors).toContain(
      '[webshard-run] rank 1 failed with exit code 1; stopped the other ranks',
    );
  });
});

describe('LinePrefixer', () => {
  it('holds partial lines until their newline', () => {
    const out = capture();
    const prefixer = new LinePrefixer('[rank 7] ', out.stream);
    prefixer.write('ab');
    prefixer.write('c\nd\ne');
    prefixer.flush();
    expect(out.text()).toBe('[rank 7] abc\n[rank 7] d\n[rank 7] e\n');
  });
});
