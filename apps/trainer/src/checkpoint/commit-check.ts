import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { MANIFEST, type ManifestFile } from '@webshard/fsdp/checkpoint';
import { CheckpointCommitError } from '../errors.js';
import {
  fileProblem,
  STEP_MANIFEST,
  type StepFile,
  type StepManifest,
  stepManifestDigest,
} from './step-manifest.js';

/**
 * [Note: a checkpoint is checked before it is committed]
 * Rank 0 commits a step (renames its temporary folder into place, then moves `latest`), but the
 * other ranks wrote some of its files, and what rank 0 knows of them came through collectives: the
 * sizes and hashes in fsdp's `manifest.json` are an all-gather's, and "every rank's file is in
 * place" is a barrier's word. A collective that answered wrongly (a barrier that returned early,
 * another op's data) once let a 2-rank run commit step 2 as `latest` with rank 1's shard absent:
 * `checkpoint.json`, listing what was in the folder, named rank 0's file only, `manifest.json`
 * both; `--resume` refused it, and the last whole checkpoint was no longer `latest`.
 *
 * So the commit believes the disk only. After `run.json` and `checkpoint.json` are written and
 * before the folder is renamed, `checkBeforeCommit` reads `checkpoint.json` back (its own hash,
 * its step), checks that every file `manifest.json` names for ranks 0 to n-1 is listed in
 * `checkpoint.json` with the same size and hash, and reads every listed file back against its
 * size and hash: what `--resume` will check ([Note: the step manifest]) and what fsdp's loader
 * will, before anything points at it. A failure is a `CheckpointCommitError` naming the step, the
 * rank whose file it is (rank 0 for every file but fsdp's rank files: it wrote them) and the file;
 * nothing was renamed, `latest` is untouched, and the caller removes the temporary folder
 * ([Note: a checkpoint directory belongs to a run]). Reading the files back costs one more read
 * of the checkpoint, from the page cache as a rule (GPT-2 under fsdp: about 1.5 GB, a second or
 * two), once every `--checkpoint-every` steps.
 */
export async function checkBeforeCommit(dir: string, step: number): Promise<void> {
  const fail = (rank: number, file: string, detail: string): never => {
    throw new CheckpointCommitError({ step, rank, file, dir }, detail);
  };
  const manifest = await readStepManifest(dir, fail);
  if (manifest.step !== step) fail(0, STEP_MANIFEST, `is of step ${manifest.step}`);
  const listed = new Map<string, StepFile>(manifest.files.map((f) => [f.file, f]));
  const rankOf = new Map<string, number>();
  if (listed.has(MANIFEST)) {
    for (const entry of await shardedFiles(dir, fail)) {
      rankOf.set(entry.file, entry.rank);
      const own = listed.get(entry.file);
      if (own !== undefined && own.bytes === entry.bytes && own.sha256 === entry.sha256) continue;
      // Not listed, or listed otherwise: the disk says which (missing, truncated, corrupted).
      const problem = await fileProblem(dir, entry, MANIFEST);
      fail(
        entry.rank,
        entry.file,
        problem ??
          `named by ${MANIFEST} but ${own === undefined ? `not listed in ${STEP_MANIFEST} (written after it?)` : `listed otherwise in ${STEP_MANIFEST}`}`,
      );
    }
  }
  for (const entry of manifest.files) {
    const problem = await fileProblem(dir, entry, STEP_MANIFEST);
    if (problem !== null) fail(rankOf.get(entry.file) ?? 0, entry.file, problem);
  }
}

type Fail = (rank: number, file: string, detail: string) => never;

/** `dir/checkpoint.json` as written, its own hash checked. */
async function readStepManifest(dir: string, fail: Fail): Promise<StepManifest> {
  let manifest: StepManifest;
  try {
    manifest = JSON.parse(await readFile(join(dir, STEP_MANIFEST), 'utf8')) as StepManifest;
  } catch (error) {
    const code = (error as { code?: string }).code;
    return fail(0, STEP_MANIFEST, code === 'ENOENT' ? 'is missing' : 'is not readable JSON');
  }
  if (!Array.isArray(manifest?.files) || manifest.sha256 !== stepManifestDigest(manifest)) {
    fail(0, STEP_MANIFEST, 'differs from what was written (its SHA-256 does not match)');
  }
  return manifest;
}

/** The rank files fsdp's `manifest.json` names, one for each rank 0 to n-1 of its world. */
async function shardedFiles(dir: string, fail: Fail): Promise<ManifestFile[]> {
  let sharded: { worldSize?: unknown; files?: unknown };
  try {
    sharded = JSON.parse(await readFile(join(dir, MANIFEST), 'utf8')) ?? {};
  } catch {
    return fail(0, MANIFEST, 'is not readable JSON');
  }
  const files = Array.isArray(sharded.files) ? (sharded.files as ManifestFile[]) : [];
  const worldSize = sharded.worldSize;
  if (typeof worldSize !== 'number' || !Number.isSafeInteger(worldSize) || worldSize < 1) {
    return fail(0, MANIFEST, `has no valid world size (${String(worldSize)})`);
  }
  const byRank: ManifestFile[] = [];
  for (let rank = 0; rank < worldSize; rank++) {
    const entry = files.find((f) => f?.rank === rank);
    if (entry === undefined || typeof entry.file !== 'string') {
      fail(rank, MANIFEST, `names no file of rank ${rank} of ${worldSize}`);
    } else {
      byRank.push(entry);
    }
  }
  if (files.length !== worldSize) {
    fail(0, MANIFEST, `names ${files.length} files for a world of ${worldSize}`);
  }
  return byRank;
}
