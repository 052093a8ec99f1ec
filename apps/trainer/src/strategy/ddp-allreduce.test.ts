import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runMain, TINY } from '../test-support/cli.js';

const STEPS = TINY.map((flag, i) => (TINY[i - 1] === '--steps' ? '10' : flag));
const DDP = [...STEPS, '--strategy', 'ddp', '--world-size', '2', '--transport', 'local'];
const NEWS =
  /^ddp: all-reduce (at the end of backward|overlapped with backward) from here on: [\d.]+ ms overlapped against [\d.]+ ms delayed \(forward to reduced, slowest rank, best of 3\); overlapped \/ delayed, median of 3 adjacent pairs: [\d.]+$/;

describe('--ddp-allreduce', () => {
  it('auto (the default) times both modes and says once which it keeps; a fixed mode says nothing', async () => {
    const auto = await runMain(DDP, '/');
    expect(auto.exitCode, auto.stderr).toBe(0);
    const lines = auto.stdout.split('\n').filter((line) => line.startsWith('ddp: all-reduce'));
    expect(lines, auto.stdout).toHaveLength(1);
    expect(lines[0]).toMatch(NEWS);
    for (const mode of ['overlap', 'delay']) {
      const fixed = await runMain([...DDP, '--ddp-allreduce', mode], '/');
      expect(fixed.exitCode, fixed.stderr).toBe(0);
      expect(fixed.stdout).not.toContain('ddp: all-reduce');
      // Every mode sums the same gradients: at two ranks the losses are the same bits.
      expect(fixed.summary!.records.map((r) => r.loss)).toEqual(
        auto.summary!.records.map((r) => r.loss),
      );
    }
  });

  it('refuses the flag outside ddp, and an unknown mode, by name', async () => {
    const single = await runMain([...TINY, '--ddp-allreduce', 'delay'], '/');
    expect(single.exitCode).toBe(2);
    expect(single.stderr).toContain('--ddp-allreduce applies to --strategy ddp, not single');
    const bad = await runMain([...DDP, '--ddp-allreduce', 'sometimes'], '/');
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr).toContain('--ddp-allreduce');
  });

  it('over shm with --comm-progress worker: each thread rank hands its rings to its worker, and the losses are those of the thread path', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'webshard-shm-worker-'));
    try {
      const shm = DDP.map((flag, i) => (DDP[i - 1] === '--transport' ? 'shm' : flag));
      const run = async (progress: string) => {
        const log = join(dir, `${progress}.jsonl`);
        const args = [...shm, '--ddp-allreduce', 'overlap', '--comm-progress', progress];
        const outcome = await runMain([...args, '--log-jsonl', log], '/');
        expect(outcome.exitCode, outcome.stderr).toBe(0);
        const lines = (await readFile(log, 'utf8')).trim().split('\n');
        return { stdout: outcome.stdout, losses: lines.map((l) => JSON.parse(l).loss as number) };
      };
      const onThread = await run('thread');
      expect(onThread.stdout).toContain('strategy: ddp on 2 rank(s) over shm\n');
      const onWorker = await run('worker');
      expect(onWorker.stdout).toContain(
        'strategy: ddp on 2 rank(s) over shm (communication on a worker)',
      );
      // Where the bytes move does not change what they are.
      expect(onWorker.losses).toHaveLength(10);
      expect(onWorker.losses).toEqual(onThread.losses);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
