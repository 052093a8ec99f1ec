import { readdirSync, rmSync, truncateSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import type { WriteStage } from '@webshard/fsdp/checkpoint';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { runMain } from '../test-support/cli.js';
import { type CliFixture, FIXTURES, readCliFixture } from '../test-support/fixtures.js';

/**
 * Checkpoints that fail in a real run (in this process: `--transport local` keeps every rank
 * here, so one hook reaches them all): a rank's file missing or truncated when rank 0 commits
 * ([Note: a checkpoint is checked before it is committed]), and a full disk under any rank's
 * write ([Note: a checkpoint directory belongs to a run]). Each run saves step 1 whole, then
 * fails at step 2: it must exit 1 with `latest` on step 1, no `.step-000002.partial` and no
 * `step-000002` left, and `--resume` must go on from step 1.
 */
const hooks = vi.hoisted(() => ({
  onWrite: null as ((file: string, stage: WriteStage) => void) | null,
}));
vi.mock('../io/fault-points.js', async (original) => {
  const real = await original<typeof import('../io/fault-points.js')>();
  return {
    ...real,
    checkpointFault: (file: string, stage: WriteStage) => {
      hooks.onWrite?.(file, stage);
      real.checkpointFault(file, stage);
    },
  };
});

let fixture: CliFixture;
let out: string;
beforeAll(async () => {
  fixture = await readCliFixture();
  out = await mkdtemp(join(tmpdir(), 'webshard-failed-checkpoint-'));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});
afterEach(() => {
  hooks.onWrite = null;
});

let count = 0;
const fresh = () => join(out, `case-${++count}`);
const FSDP = ['--strategy', 'fsdp', '--world-size', '2', '--transport', 'local'];
const STEP_2 = '.step-000002.partial';

async function run(extra: readonly string[]) {
  return runMain([...fixture.flags, '--backend', 'cpu', ...extra], FIXTURES);
}

/** 2 steps with a checkpoint after each into `dir`; the hook fails step 2's. */
async function failAtStep2(flags: readonly string[], dir: string) {
  return run([...flags, '--steps', '2', '--checkpoint-every', '1', '--checkpoint-dir', dir]);
}

/** `latest` on step 1, nothing of step 2 left, and a resume that goes on from step 1. */
async function expectStep1Kept(flags: readonly string[], dir: string): Promise<void> {
  expect((await readFile(join(dir, 'latest'), 'utf8')).trim()).toBe('step-000001');
  expect((await readdir(dir)).sort()).toEqual(['latest', 'step-000001']);
  const resumed = await run([...flags, '--steps', '2', '--resume', dir]);
  expect(resumed.stderr).toBe('');
  expect(resumed.exitCode).toBe(0);
  expect(resumed.stdout).toContain('(step 1)');
}

/** A full disk: `ENOSPC` from the write of the first file of step 2 that `pick` names. */
function diskFullAt(pick: (name: string) => boolean): void {
  hooks.onWrite = (file, stage) => {
    if (stage === 'written' && basename(dirname(file)) === STEP_2 && pick(basename(file))) {
      throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
    }
  };
}

describe('a step whose files do not check out on disk is not committed', () => {
  // Rank 0 has written fsdp's manifest.json (naming both ranks' files, from its all-gather), then
  // rank 1's file goes, or shrinks: as when a collective told rank 0 it was there when it was not.
  for (const [what, change, detail] of [
    ['missing', (path: string) => rmSync(path), 'listed in manifest.json but missing'],
    ['truncated', (path: string) => truncateSync(path, 100), 'has 100 bytes, manifest.json says'],
  ] as const) {
    it(`fsdp, rank 1's file ${what} at the commit: exit 1 naming the step, the rank and the file`, async () => {
      const dir = fresh();
      let rank1File = '';
      hooks.onWrite = (file, stage) => {
        if (stage !== 'renamed' || basename(file) !== 'manifest.json') return;
        const partial = dirname(file);
        if (basename(partial) !== STEP_2) return;
        rank1File = readdirSync(partial).find((n) => n.endsWith('-rank1-of-2.safetensors'))!;
        change(join(partial, rank1File));
      };
      const failed = await failAtStep2(FSDP, dir);
      expect(rank1File).not.toBe('');
      expect(failed.exitCode, failed.stderr).toBe(1);
      expect(failed.stderr).toContain(
        `CheckpointCommitError: [checkpoint] step 2, rank 1: ${rank1File} ${detail}`,
      );
      expect(failed.stdout).not.toContain('step-000002');
      hooks.onWrite = null;
      await expectStep1Kept(FSDP, dir);
    });
  }
});

describe('a checkpoint that fails leaves no .partial folder, and the previous one loads', () => {
  for (const [strategy, flags, pick] of [
    ['fsdp, ENOSPC under rank 1', FSDP, (name: string) => name.includes('-rank1-of-2')],
    ['fsdp, ENOSPC under rank 0', FSDP, (name: string) => name.includes('-rank0-of-2')],
    [
      'single, ENOSPC under the optimizer state',
      [],
      (name: string) => name === 'optimizer.safetensors',
    ],
    ['single, ENOSPC under checkpoint.json', [], (name: string) => name === 'checkpoint.json'],
  ] as const) {
    it(strategy, async () => {
      const dir = fresh();
      diskFullAt(pick);
      const failed = await failAtStep2(flags, dir);
      expect(failed.exitCode, failed.stderr).toBe(1);
      expect(failed.stderr).toContain('no space left on device (ENOSPC)');
      hooks.onWrite = null;
      await expectStep1Kept(flags, dir);
    });
  }
});
