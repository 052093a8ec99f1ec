import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runMain } from '../test-support/cli.js';
import {
  type CliFixture,
  FIXTURES,
  maxRelativeGap,
  readCliFixture,
} from '../test-support/fixtures.js';
import { readReportData } from '../report/html-report.js';

const CLI = join(import.meta.dirname, '..', 'cli.ts');

let fixture: CliFixture;
let out: string;
beforeAll(async () => {
  fixture = await readCliFixture();
  out = await mkdtemp(join(tmpdir(), 'webshard-ranks-'));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

/** `webshard-train` as a user runs it (tsx on the source), in the fixtures' directory. */
function startCli(args: readonly string[]): {
  child: ChildProcess;
  done: Promise<{ code: number | null; stdout: string; stderr: string }>;
} {
  const child = spawn(
    process.execPath,
    ['--conditions=@webshard/source', '--import', 'tsx', CLI, ...args],
    // A shell's environment: no INIT_CWD (pnpm's) from the test runner.
    {
      cwd: FIXTURES,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, INIT_CWD: undefined },
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
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.on('close', (code) => resolve({ code, stdout, stderr })),
  );
  return { child, done };
}

async function jsonlLosses(path: string): Promise<number[]> {
  const text = await readFile(path, 'utf8');
  return text
    .trim()
    .split('\n')
    .map((line) => (JSON.parse(line) as { loss: number }).loss);
}

describe('ranks in worker threads and processes train like PyTorch', () => {
  it('fsdp on 2 worker threads (shm)', async () => {
    const log = join(out, 'shm.jsonl');
    const report = join(out, 'shm.html');
    const run = await runMain(
      [
        ...[...fixture.flags, '--backend', 'cpu', '--strategy', 'fsdp', '--world-size', '2'],
        ...['--log-jsonl', log, '--report', report],
      ],
      FIXTURES,
    );
    expect(run.stderr).toBe('');
    expect(run.exitCode).toBe(0);
    expect(run.stdout).toContain('strategy: fsdp on 2 rank(s) over shm');
    // The report draws each rank's peak memory (fsdp: each holds half the shards).
    const page = await readFile(report, 'utf8');
    const first = readReportData(page).runs[0]!.records[0]!;
    expect(first.peakDeviceBytesPerRank).toHaveLength(2);
    expect(first.tokensPerSecondPerRank).toHaveLength(2);
    // The log keeps them too (webshard-report draws a log's ranks): each rank's share of the
    // batch over its own step time.
    const line = JSON.parse((await readFile(log, 'utf8')).split('\n')[0]!);
    expect(line.peakDeviceBytesPerRank).toEqual(first.peakDeviceBytesPerRank);
    expect(line.tokensPerSecondPerRank).toEqual(first.tokensPerSecondPerRank);
    for (const t of line.tokensPerSecondPerRank) {
      expect(t).toBeGreaterThan(0);
      expect(t).toBeLessThan(line.tokensPerSecond);
    }
    expect(maxRelativeGap(await jsonlLosses(log), fixture.losses)).toBeLessThan(1e-5);
  });

  for (const [strategy, transport] of [
    ['ddp', 'tcp'],
    ['fsdp', 'ws'],
  ] as const) {
    it(`${strategy} on 2 processes over ${transport}, started by the trainer through webshard-run`, async () => {
      const log = join(out, `${transport}.jsonl`);
      const args = ['--strategy', strategy, '--world-size', '2', '--transport', transport];
      const { done } = startCli([
        ...fixture.flags,
        '--backend',
        'cpu',
        ...args,
        '--log-jsonl',
        log,
      ]);
      const { code, stdout, stderr } = await done;
      expect(stderr).toBe('');
      expect(code).toBe(0);
      // Rank 0 prints, through the launcher's prefix; rank 1 prints nothing.
      expect(stdout).toContain(`[rank 0] strategy: ${strategy} on 2 rank(s) over ${transport}`);
      expect(stdout).not.toContain('[rank 1]');
      expect(maxRelativeGap(await jsonlLosses(log), fixture.losses)).toBeLessThan(1e-5);
    });
  }
});

describe('a rank that dies', () => {
  it('fails the run fast naming it; resuming from the last checkpoint ends where an unbroken run does, at this world size and another', async () => {
    const steps = ['--steps', '120'];
    const log = join(out, 'killed.jsonl');
    const save = join(out, 'killed.safetensors');
    const checkpoints = join(out, 'killed-checkpoints');
    const base = [...fixture.flags, '--backend', 'cpu', ...steps];
    const ranks = (world: number) => [
      '--strategy',
      'fsdp',
      '--world-size',
      `${world}`,
      '--transport',
      'ws',
    ];
    const { child, done } = startCli([
      ...base,
      ...ranks(2),
      ...['--checkpoint-every', '5', '--checkpoint-dir', checkpoints],
      ...['--log-jsonl', log, '--save', save],
    ]);
    // Wait until a checkpoint is complete and training goes on, then kill rank 1's process.
    let rank1: number | undefined;
    for (let i = 0; i < 400 && rank1 === undefined; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const latest = await readFile(join(checkpoints, 'latest'), 'utf8').catch(() => '');
      if (latest !== '') rank1 = await findRank(child.pid!, 1);
    }
    expect(rank1, 'rank 1 was not found under way').toBeDefined();
    const killedAt = Date.now();
    process.kill(rank1!, 'SIGKILL');
    const killed = await done;
    expect(Date.now() - killedAt).toBeLessThan(10_000);
    expect(killed.code).toBe(1);
    expect(killed.stderr).toContain(
      'webshard-train: rank 1 was killed by SIGKILL; stopped the other ranks',
    );
    await expect(readFile(save)).rejects.toThrow(/ENOENT/);
    const stoppedAt = (await jsonlLosses(log)).length;
    expect(stoppedAt).toBeLessThan(120);

    // The run never stopped, in this process, for the final loss to reach.
    const unbroken = await runMain(
      [...base, ...ranks(2).slice(0, 4), '--transport', 'local'],
      FIXTURES,
    );
    expect(unbroken.exitCode).toBe(0);
    const finalLoss = unbroken.summary!.records.at(-1)!.loss;
    for (const world of [2, 4]) {
      const resumedLog = join(out, `resumed-${world}.jsonl`);
      const resumed = await startCli([
        ...base,
        ...ranks(world),
        '--resume',
        checkpoints,
        '--log-jsonl',
        resumedLog,
      ]).done;
      expect(resumed.stderr).toBe('');
      expect(resumed.code).toBe(0);
      const losses = await jsonlLosses(resumedLog);
      expect(Math.abs(losses.at(-1)! - finalLoss) / finalLoss, `world ${world}`).toBeLessThan(1e-5);
    }
  }, 180_000);
});

/** The pid of the launched child whose RANK is `rank` (Linux: /proc). */
async function findRank(parent: number, rank: number): Promise<number | undefined> {
  // A descendant, not a child: the CLI runs itself again under a stderr filter ([Note: quiet
  // native stderr in the CLIs] in @webshard/collectives), whose child starts the ranks.
  const { readdir } = await import('node:fs/promises');
  const parents = new Map<number, number>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = await readFile(`/proc/${entry}/stat`, 'utf8');
      parents.set(Number(entry), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // A process that ended meanwhile.
    }
  }
  const under = (pid: number) => {
    for (let up = parents.get(pid); up !== undefined && up > 1; up = parents.get(up)) {
      if (up === parent) return true;
    }
    return false;
  };
  for (const pid of parents.keys()) {
    if (!under(pid)) continue;
    try {
      const env = (await readFile(`/proc/${pid}/environ`, 'utf8')).split('\0');
      if (env.includes(`RANK=${rank}`)) return pid;
    } catch {
      // A process that ended meanwhile.
    }
  }
  return undefined;
}
