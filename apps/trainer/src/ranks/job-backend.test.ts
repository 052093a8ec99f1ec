import { createLocalGroups } from '@webshard/collectives';
import {
  type Backend,
  createBackend,
  createCpuBackend,
  NoAdapterError,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import type { TrainConfig } from '../config.js';
import { parseOptions } from '../cli/options.js';
import { BackendMismatchError } from '../errors.js';
import { runMain, TINY } from '../test-support/cli.js';
import { agreeOnJobBackend, checkSameBackend } from './job-backend.js';

/** TINY without its `--backend cpu`: the job decides. */
const AUTO = TINY.filter((flag, i) => flag !== '--backend' && TINY[i - 1] !== '--backend');

/** The `backend auto:` line's times and winner. */
function probeLine(stdout: string): { kind: string; cpuMs: number; webgpuMs: number | null } {
  const lines = stdout.split('\n').filter((line) => line.startsWith('backend auto:'));
  expect(lines, stdout).toHaveLength(1);
  const line = lines[0]!;
  expect(line.length).toBeLessThan(120);
  const measuredBoth =
    /^backend auto: probe step ([\d.]+) ms on webgpu, ([\d.]+) ms on cpu: using (cpu|webgpu) /.exec(
      line,
    );
  if (measuredBoth !== null) {
    return {
      webgpuMs: Number(measuredBoth[1]),
      cpuMs: Number(measuredBoth[2]),
      kind: measuredBoth[3]!,
    };
  }
  // No adapter here: only acceptable where CI does not require WebGPU.
  expect(process.env.WEBSHARD_REQUIRE_WEBGPU, line).not.toBe('1');
  expect(line).toMatch(/^backend auto: webgpu is unavailable \(.*\): using cpu /);
  return { kind: 'cpu', cpuMs: 0, webgpuMs: null };
}

/** Whether this machine has a WebGPU adapter (CI requires one: WEBSHARD_REQUIRE_WEBGPU=1). */
const webgpu = await createBackend({ kind: 'webgpu' }).then(
  (backend) => {
    backend.dispose();
    return true;
  },
  (error: unknown) => {
    if (NoAdapterError.isInstance(error) && process.env.WEBSHARD_REQUIRE_WEBGPU !== '1')
      return false;
    throw error;
  },
);

describe('one backend for the job', () => {
  for (const strategy of ['ddp', 'fsdp']) {
    it(`${strategy} on 2 worker threads: decided once by the probe, the faster backend on every rank`, async () => {
      const run = await runMain(
        [...AUTO, '--strategy', strategy, '--world-size', '2', '--transport', 'shm'],
        process.cwd(),
      );
      expect(run.stderr).toBe('');
      expect(run.exitCode).toBe(0);
      const probe = probeLine(run.stdout);
      if (probe.webgpuMs !== null) {
        // The winner is the one whose probe step was shorter (a tie goes to the CPU backend).
        expect(probe.kind).toBe(probe.webgpuMs < probe.cpuMs ? 'webgpu' : 'cpu');
      }
      // Each rank checked its backend against the others' before the first step.
      expect(run.stdout).toMatch(new RegExp(`^backend: ${probe.kind} on all 2 ranks \\(`, 'm'));
      expect(run.stdout.match(/^backend: /gm)).toHaveLength(1);
    }, 60_000);
  }

  it.runIf(webgpu)(
    '--backend webgpu on 2 worker threads: each rank has its own device',
    async () => {
      const run = await runMain(
        [...AUTO, '--backend', 'webgpu', '--strategy', 'fsdp', '--world-size', '2'],
        process.cwd(),
      );
      expect(run.stderr).toBe('');
      expect(run.exitCode).toBe(0);
      expect(run.stdout).not.toContain('backend auto:');
      expect(run.stdout).toMatch(/^backend: webgpu on all 2 ranks \(/m);
    },
    60_000,
  );

  it('ranks that a launcher started take rank 0 decision, which rank 0 alone makes', async () => {
    const config = parseOptions(
      [...AUTO, '--strategy', 'ddp', '--world-size', '2', '--transport', 'tcp'],
      '/',
    ) as TrainConfig;
    const groups = createLocalGroups(2, { timeoutMs: 10_000 });
    const asked: number[] = [];
    const decided = await Promise.all(
      groups.map((group) =>
        agreeOnJobBackend(config, group, async () => {
          asked.push(group.rank);
          return 'webgpu';
        }),
      ),
    );
    expect(decided.map((c) => c.backend)).toEqual(['webgpu', 'webgpu']);
    expect(asked).toEqual([0]);
    await Promise.all(groups.map((g) => g.close()));
  });

  it('ranks on different backends fail before the first step, naming each', async () => {
    const groups = createLocalGroups(3, { timeoutMs: 10_000 });
    const cpu = createCpuBackend();
    const gpu = { kind: 'webgpu' } as Backend;
    const results = await Promise.allSettled(
      groups.map((group) => checkSameBackend(group, group.rank === 1 ? gpu : cpu)),
    );
    for (const result of results) {
      expect(result.status).toBe('rejected');
      const error = (result as PromiseRejectedResult).reason;
      expect(BackendMismatchError.isInstance(error)).toBe(true);
      expect(error.message).toBe(
        'the ranks run on different backends (rank 0: cpu, rank 1: webgpu, rank 2: cpu): pass --backend cpu|webgpu',
      );
    }
    await expect(checkSameBackend(createLocalGroups(1)[0]!, cpu)).resolves.toBeUndefined();
    await Promise.all(groups.map((g) => g.close()));
    cpu.dispose();
  });
});
