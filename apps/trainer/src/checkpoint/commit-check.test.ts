import { createHash } from 'node:crypto';
import { truncateSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { CheckpointCommitError } from '../errors.js';
import {
  abandonCheckpoint,
  beginCheckpoint,
  finishCheckpoint,
  resolveResume,
} from './checkpoint-dir.js';
import type { RunState } from './run-checkpoint.js';
import { verifyStep } from './step-manifest.js';

// A hook at the trainer's fault points, to change the folder between `checkpoint.json` and the
// rename ([Note: the trainer's fault points]: 'manifest' is passed right after it is written).
const hooks = vi.hoisted(() => ({ onPoint: null as ((label: string) => void) | null }));
vi.mock('../io/fault-points.js', async (original) => ({
  ...(await original<typeof import('../io/fault-points.js')>()),
  faultPoint: (label: string) => hooks.onPoint?.(label),
}));

let out: string;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), 'webshard-commit-check-'));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});
afterEach(() => {
  hooks.onPoint = null;
});

let count = 0;
const fresh = () => join(out, `case-${++count}`);
const RUN = 'run-commit-check';
const sha256 = (bytes: Uint8Array | string) => createHash('sha256').update(bytes).digest('hex');

function stateOf(step: number): RunState {
  return {
    runId: RUN,
    step,
    strategy: 'fsdp',
    worldSize: 2,
    scaler: null,
    history: { records: [], evals: [] },
  };
}

/**
 * Rank files of a 2-rank fsdp save into step `step`'s temporary folder, and fsdp's manifest naming
 * both with their sizes and hashes (as its all-gather reported them); `ranks` says which files
 * are actually written. Resolves to the folder and the file names by rank.
 */
async function shardedSave(
  root: string,
  step: number,
  ranks: readonly number[] = [0, 1],
): Promise<{ partial: string; files: string[] }> {
  const partial = await beginCheckpoint(root, step, true);
  const files: string[] = [];
  const entries = [];
  for (let rank = 0; rank < 2; rank++) {
    const file = `save${step}-rank${rank}-of-2.safetensors`;
    const bytes = new TextEncoder().encode(`step ${step}, the shard of rank ${rank}`.repeat(8));
    files.push(file);
    entries.push({ rank, file, bytes: bytes.byteLength, sha256: sha256(bytes) });
    if (ranks.includes(rank)) await writeFile(join(partial, file), bytes);
  }
  const manifest = {
    format: 'webshard-fsdp-checkpoint',
    version: 2,
    worldSize: 2,
    step,
    extra: { runId: RUN, step },
    files: entries,
  };
  await writeFile(join(partial, 'manifest.json'), JSON.stringify(manifest));
  return { partial, files };
}

/** A root whose `latest` is a whole step 1. */
async function rootAtStep1(): Promise<string> {
  const root = fresh();
  const { partial } = await shardedSave(root, 1);
  await finishCheckpoint(root, partial, stateOf(1), false);
  expect((await readFile(join(root, 'latest'), 'utf8')).trim()).toBe('step-000001');
  return root;
}

/** `latest` still names step 1, which checks out whole, and no step-2 folder was committed. */
async function expectStep1Latest(root: string): Promise<void> {
  expect((await readFile(join(root, 'latest'), 'utf8')).trim()).toBe('step-000001');
  const dir = await resolveResume(root);
  expect(dir).toBe(join(root, 'step-000001'));
  expect((await verifyStep(dir, 'run.json')).step).toBe(1);
}

async function commitError(promise: Promise<unknown>): Promise<CheckpointCommitError> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(CheckpointCommitError.isInstance(error), String(error)).toBe(true);
  return error as CheckpointCommitError;
}

describe('a checkpoint is checked on disk before it is committed', () => {
  it('commits a whole step: latest moves to it', async () => {
    const root = await rootAtStep1();
    const { partial } = await shardedSave(root, 2);
    await finishCheckpoint(root, partial, stateOf(2), false);
    expect((await readFile(join(root, 'latest'), 'utf8')).trim()).toBe('step-000002');
    expect((await verifyStep(join(root, 'step-000002'), 'run.json')).step).toBe(2);
  });

  it('refuses a step whose manifest names a rank file that is absent, naming the step, the rank and the file', async () => {
    const root = await rootAtStep1();
    const { partial, files } = await shardedSave(root, 2, [0]);
    const error = await commitError(finishCheckpoint(root, partial, stateOf(2), false));
    expect({ step: error.step, rank: error.rank, file: error.file }).toEqual({
      step: 2,
      rank: 1,
      file: files[1],
    });
    expect(error.message).toBe(
      `[checkpoint] step 2, rank 1: ${files[1]} listed in manifest.json but missing; the step is not committed (latest is unchanged): ${partial}`,
    );
    expect(await readdir(root)).not.toContain('step-000002');
    await expectStep1Latest(root);
  });

  it('refuses a rank file shorter than the manifest says (truncated before the commit)', async () => {
    const root = await rootAtStep1();
    const { partial, files } = await shardedSave(root, 2);
    await truncate(join(partial, files[1]!), 10);
    const error = await commitError(finishCheckpoint(root, partial, stateOf(2), false));
    expect({ step: error.step, rank: error.rank, file: error.file }).toEqual({
      step: 2,
      rank: 1,
      file: files[1],
    });
    expect(error.message).toContain('has 10 bytes, manifest.json says');
    await expectStep1Latest(root);
  });

  it('refuses a manifest that names no file for a rank of its world', async () => {
    const root = await rootAtStep1();
    const { partial } = await shardedSave(root, 2);
    const manifest = JSON.parse(await readFile(join(partial, 'manifest.json'), 'utf8'));
    manifest.files = manifest.files.slice(0, 1);
    await writeFile(join(partial, 'manifest.json'), JSON.stringify(manifest));
    const error = await commitError(finishCheckpoint(root, partial, stateOf(2), false));
    expect({ rank: error.rank, file: error.file }).toEqual({ rank: 1, file: 'manifest.json' });
    expect(error.message).toContain('manifest.json names no file of rank 1 of 2');
    await expectStep1Latest(root);
  });

  it('refuses a file listed in checkpoint.json that changed after it was written', async () => {
    const root = await rootAtStep1();
    const { partial, files } = await shardedSave(root, 2);
    let truncated = false;
    hooks.onPoint = (label) => {
      // Synchronous, as a rank's late write would land between checkpoint.json and the rename.
      if (label === 'manifest' && !truncated) {
        truncated = true;
        truncateSync(join(partial, files[0]!), 3);
      }
    };
    const error = await commitError(finishCheckpoint(root, partial, stateOf(2), false));
    expect(truncated).toBe(true);
    expect({ rank: error.rank, file: error.file }).toEqual({ rank: 0, file: files[0] });
    await expectStep1Latest(root);
  });

  it('saving a step again: an incomplete new save leaves the complete old one and latest as they were', async () => {
    const root = await rootAtStep1();
    const first = await shardedSave(root, 2);
    await finishCheckpoint(root, first.partial, stateOf(2), false);
    const before = await readFile(join(root, 'step-000002', 'checkpoint.json'), 'utf8');
    // A resumed run saving step 2 again, with rank 1's file missing.
    const again = await shardedSave(root, 2, [0]);
    await commitError(finishCheckpoint(root, again.partial, stateOf(2), false));
    expect((await readFile(join(root, 'latest'), 'utf8')).trim()).toBe('step-000002');
    expect(await readFile(join(root, 'step-000002', 'checkpoint.json'), 'utf8')).toBe(before);
    expect((await verifyStep(join(root, 'step-000002'), 'run.json')).step).toBe(2);
  });

  it('abandonCheckpoint removes the temporary folder and nothing else', async () => {
    const root = await rootAtStep1();
    await shardedSave(root, 2, [0]);
    await abandonCheckpoint(root, 2);
    expect((await readdir(root)).sort()).toEqual(['latest', 'step-000001']);
    await abandonCheckpoint(root, 2); // none there: no error
    await expectStep1Latest(root);
  });

  it('abandonCheckpoint removes the folder while another rank still writes into it', async () => {
    // CI once kept `.step-000002.partial` after rank 0's ENOSPC (failed-checkpoint.test.ts): rank 1
    // added its file while rank 0 emptied the folder, and the final rmdir failed ENOTEMPTY.
    const root = await rootAtStep1();
    const left: number[] = [];
    for (let round = 0; round < 20; round++) {
      const { partial } = await shardedSave(root, 2);
      let files = 0;
      const writer = (async () => {
        for (; files < 3; files++) {
          await writeFile(join(partial, `late-${files}.tmp`), 'rank 1').catch(() => undefined);
        }
      })();
      await abandonCheckpoint(root, 2);
      await writer;
      if ((await readdir(root)).length !== 2) left.push(round);
      await rm(partial, { recursive: true, force: true });
    }
    expect(left).toEqual([]);
  });
});
