import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCpuBackend } from '@webshard/tensor-core';
import { loadSafetensors } from '@webshard/tensor-core/node';
import { webGpuTestsEnabled } from '@webshard/tensor-core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runMain } from './test-support/cli.js';
import {
  type CliFixture,
  FIXTURES,
  maxRelativeGap,
  readCliFixture,
} from './test-support/fixtures.js';

/**
 * [Note: every strategy against PyTorch]
 * `__fixtures__/make_fixtures.py` trains nanoGPT in PyTorch (CPU, f32, AdamW with the two decay
 * groups, clip 1, constant lr) for 20 steps on `gpt-cli.tokens.bin`, taking its batches by the
 * CLI's rule, and records the flags of the same run. Every strategy below runs those flags through
 * the CLI and must give PyTorch's per-step losses (the mean over ranks) and final weights. The
 * issue asks 1e-4; we hold 1e-5 on the losses, measured at most 1.5e-7 for every row (the size of
 * f32 rounding), and 1e-5 on the weights (absolute; they are at most 1.02), measured at most 2.7e-6.
 */
let fixture: CliFixture;
let out: string;
beforeAll(async () => {
  fixture = await readCliFixture();
  out = await mkdtemp(join(tmpdir(), 'webshard-strategies-'));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

/** Run the fixture's flags plus `extra` in this process; the losses and the saved weights' largest gap. */
export async function runFixture(
  extra: readonly string[],
  name: string,
  compareWeights = true,
): Promise<{ losses: number[]; weightGap: number; stdout: string; stderr: string }> {
  const save = join(out, `${name}.safetensors`);
  const run = await runMain(
    [...fixture.flags, '--backend', 'cpu', '--save', save, ...extra],
    FIXTURES,
  );
  expect(run.stderr).toBe('');
  expect(run.exitCode).toBe(0);
  const losses = run.summary!.records.map((r) => r.loss);
  const gap = compareWeights ? await weightGap(save) : Number.NaN;
  return { losses, weightGap: gap, stdout: run.stdout, stderr: run.stderr };
}

/** The largest |saved - PyTorch's final| over every weight of `gpt-cli.final.safetensors`. */
export async function weightGap(path: string): Promise<number> {
  const backend = createCpuBackend();
  const saved = (await loadSafetensors(path, { backend })).tensors;
  const expected = (await loadSafetensors(join(FIXTURES, 'gpt-cli.final.safetensors'), { backend }))
    .tensors;
  expect(Object.keys(saved).sort()).toEqual(Object.keys(expected).sort());
  let gap = 0;
  for (const [name, tensor] of Object.entries(expected)) {
    const want = await tensor.read();
    const got = await saved[name]!.read();
    for (let i = 0; i < want.length; i++) gap = Math.max(gap, Math.abs(got[i]! - want[i]!));
  }
  return gap;
}

const ROWS: [string, string[]][] = [
  ['single', []],
  ['ddp on 2 ranks', ['--strategy', 'ddp', '--world-size', '2', '--transport', 'local']],
  [
    'ddp on 4 ranks, 2 micro-batches, small buckets',
    [
      ...['--strategy', 'ddp', '--world-size', '4', '--transport', 'local'],
      ...['--grad-accum', '2', '--bucket-mb', '0.01'],
    ],
  ],
  ['fsdp on 2 ranks', ['--strategy', 'fsdp', '--world-size', '2', '--transport', 'local']],
  ['fsdp on 4 ranks', ['--strategy', 'fsdp', '--world-size', '4', '--transport', 'local']],
  [
    'fsdp on 2 ranks, root only, kept after forward, 2 micro-batches',
    [
      ...['--strategy', 'fsdp', '--world-size', '2', '--transport', 'local'],
      ...['--auto-wrap', 'none', '--reshard-after-forward', 'false', '--grad-accum', '2'],
    ],
  ],
  ['offload, 3 slices', ['--strategy', 'offload']],
  [
    'offload, 4 slices, checkpointed activations, 2 micro-batches, 2 accumulation steps',
    [
      ...['--strategy', 'offload', '--num-slices', '4', '--checkpoint-activation'],
      ...['--num-microbatches', '2', '--grad-accum', '2'],
    ],
  ],
];

describe('every strategy trains like PyTorch (20 steps from the same weights and batches)', () => {
  for (const [name, extra] of ROWS) {
    it(name, async () => {
      const run = await runFixture(extra, name.replace(/\W+/g, '-'));
      expect(run.losses).toHaveLength(fixture.losses.length);
      expect(maxRelativeGap(run.losses, fixture.losses)).toBeLessThan(1e-5);
      expect(run.weightGap).toBeLessThan(1e-5);
    });
  }
});

describe('16-bit compute under each strategy', () => {
  for (const precision of ['bf16', 'fp16']) {
    it(`fsdp and ddp in ${precision} follow single-process training in ${precision}`, async () => {
      // 8 steps: 16-bit arithmetic is emulated on the CPU backend, and slow.
      const flags = ['--precision', precision, '--steps', '8'];
      const single = await runFixture(flags, `single-${precision}`, false);
      for (const strategy of ['ddp', 'fsdp']) {
        const ranks = ['--strategy', strategy, '--world-size', '2', '--transport', 'local'];
        const run = await runFixture([...flags, ...ranks], `${strategy}-${precision}`, false);
        // Each rank rounds its own half of the batch: not the same bits, the same run.
        expect(maxRelativeGap(run.losses, single.losses), strategy).toBeLessThan(5e-3);
      }
      // And the flag took effect: the same run in f32 gives other numbers.
      const f32 = await runFixture(['--steps', '8'], 'single-f32-8', false);
      expect(maxRelativeGap(single.losses, f32.losses)).toBeGreaterThan(0);
    });
  }
});

describe('offload trains a model its device cannot hold', () => {
  it('single is refused under a 600000-byte device; offload trains there like PyTorch', async () => {
    const limit = ['--memory-limit', '600000'];
    const single = await runMain([...fixture.flags, '--backend', 'cpu', ...limit], FIXTURES);
    expect(single.exitCode).toBe(2);
    expect(single.stderr).toContain('more than --memory-limit 600000');
    const flags = ['--strategy', 'offload', '--num-slices', '4', '--checkpoint-activation'];
    const run = await runFixture(
      [...flags, '--num-microbatches', '2', ...limit],
      'offload-limited',
    );
    expect(maxRelativeGap(run.losses, fixture.losses)).toBeLessThan(1e-5);
    expect(run.weightGap).toBeLessThan(1e-5);
    const peak = Number(/peak device memory ([\d.]+) KiB/.exec(run.stdout)![1]) * 1024;
    expect(peak).toBeLessThan(600000);
  });
});

describe.skipIf(!webGpuTestsEnabled())('fsdp with --move-params-to-cpu on WebGPU', () => {
  it('keeps shards and AdamW state on the host: PyTorch’s losses, less device memory', async () => {
    const ranks = ['--strategy', 'fsdp', '--world-size', '2', '--transport', 'local'];
    const peakOf = (stdout: string) => {
      const [, value, unit] = /peak device memory ([\d.]+) (KiB|MiB)/.exec(stdout)!;
      return Number(value) * (unit === 'MiB' ? 2 ** 20 : 2 ** 10);
    };
    const runs = [];
    for (const extra of [[], ['--move-params-to-cpu']]) {
      const run = await runMain(
        [...fixture.flags, '--backend', 'webgpu', ...ranks, ...extra],
        FIXTURES,
      );
      expect(run.stderr).toBe('');
      expect(run.exitCode).toBe(0);
      const losses = run.summary!.records.map((r) => r.loss);
      expect(maxRelativeGap(losses, fixture.losses)).toBeLessThan(1e-5);
      runs.push(peakOf(run.stdout));
    }
    // Measured: 853.8 KiB on the device without, 661.3 KiB with (lavapipe).
    expect(runs[1]!).toBeLessThan(runs[0]! * 0.85);
  });
});
