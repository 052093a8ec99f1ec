import { mkdir, readdir, readFile, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { syncDirectory, writeFileAtomic } from '@webshard/fsdp/checkpoint';
import { UsageError } from '../errors.js';
import { checkpointFault, faultPoint } from '../io/fault-points.js';
import { checkBeforeCommit } from './commit-check.js';
import { LATEST, RUN_STATE, type RunState, stepDirName } from './run-checkpoint.js';
import { peekStepManifest, STEP_MANIFEST, writeStepManifest } from './step-manifest.js';

/**
 * [Note: a checkpoint directory belongs to a run]
 * A run draws an id (a resumed run keeps its checkpoint's); every step folder's `checkpoint.json`
 * and `run.json` carry it. A run without `--resume` refuses a `--checkpoint-dir` holding another
 * run's step folders, naming the directory and the run, unless `--overwrite-checkpoints` (then
 * the other run's folders go at this run's first checkpoint); a resumed run refuses one holding
 * steps of a run other than the one it resumes, likewise. Cleanup keeps this run's two newest
 * steps at or below the one just written and touches no other run's folder.
 *
 * A step is saved into `.step-N.partial` (emptied first by rank 0; every rank writes its files
 * there), then rank 0 writes `run.json` and `checkpoint.json` into it, fsyncs it, reads every file
 * back ([Note: a checkpoint is checked before it is committed]), and renames it into place; only
 * then `latest` moves. A complete step folder is never rewritten: re-saving step N (a run resumed
 * from an earlier step) renames the new folder to `.step-N.swap`, points `latest` there, moves the
 * old folder aside, renames the new one into place and points `latest` back, so `latest` names a
 * complete folder at every instant (a `latest` naming a `.step-N.swap` that is gone means the swap
 * finished: `resolveLatest` reads it as `step-N`).
 *
 * A checkpoint that fails on the way (a full disk under any rank, a rank's file missing at the
 * check, a lost rank) is abandoned as a failed file write is: rank 0, which made the folder,
 * removes `.step-N.partial` (`abandonCheckpoint`) before the error goes on, and `latest` still
 * names the previous checkpoint, which loads. Only rank 0 removes it: another rank that failed
 * could otherwise remove files under rank 0 while it checks them; rank 0 fails too (its collective
 * is aborted, or its check finds the file missing) and removes it then. A crash (no error to
 * catch) leaves the folder to the next checkpoint's cleanup, or to `removePartialCheckpoints`.
 */
const KEEP = 2;
const STEP = /^step-\d{6,}$/;

/** The run ids found in the step folders of `root` with the folder of each (none: empty). */
async function runsIn(root: string): Promise<Map<string, string>> {
  const runs = new Map<string, string>();
  const names = await readdir(root).catch(() => [] as string[]);
  for (const name of names.filter((n) => STEP.test(n)).sort()) {
    const manifest = await peekStepManifest(join(root, name));
    runs.set(manifest?.runId ?? '(no run id: an older or foreign checkpoint)', name);
  }
  return runs;
}

/**
 * Refuse `--checkpoint-dir root` if it holds another run's steps (see [Note: a checkpoint
 * directory belongs to a run]). `runId` is the resumed run's, or null for a new run.
 */
export async function checkCheckpointDir(
  root: string,
  runId: string | null,
  overwrite: boolean,
): Promise<void> {
  if (overwrite) return;
  for (const [other, folder] of await runsIn(root)) {
    if (other === runId) continue;
    throw new UsageError(
      `--checkpoint-dir ${root} holds checkpoints of another run (run ${other}, ${folder}): ${runId === null ? 'pass --resume to continue it, ' : ''}choose another directory, or pass --overwrite-checkpoints to replace them`,
      { option: '--checkpoint-dir' },
    );
  }
}

function partialDir(root: string, step: number): string {
  return join(root, `.${stepDirName(step)}.partial`);
}

/** The temporary folder step `step` is saved into; rank 0 empties it (`lead`). */
export async function beginCheckpoint(root: string, step: number, lead: boolean): Promise<string> {
  const partial = partialDir(root, step);
  if (lead) {
    await rm(partial, { recursive: true, force: true });
    await mkdir(partial, { recursive: true });
  }
  return partial;
}

/**
 * Rank 0, when saving step `step` failed anywhere (a rank's write, the check, the rename): remove
 * its temporary folder. Never throws, so the error that ended the checkpoint is the one reported;
 * a folder it could not remove goes at the next checkpoint's cleanup.
 */
export async function abandonCheckpoint(root: string, step: number): Promise<void> {
  // Another rank may still be writing its file into the folder (its write had not failed yet): a
  // file it adds while the folder is emptied fails the last `rmdir` with ENOTEMPTY, which the
  // retries empty again. It cannot make the folder again (only `beginCheckpoint` does).
  await rm(partialDir(root, step), {
    recursive: true,
    force: true,
    maxRetries: 10,
    retryDelay: 20,
  }).catch(() => undefined);
}

/**
 * Removes the unfinished checkpoints (`.step-NNNNNN.partial`) in `root`: rank 0 of an elastic
 * world restarting from its last checkpoint clears what the world before left half-written, before
 * any rank begins a checkpoint of the same step (then `beginCheckpoint`'s own removal could race
 * with another rank's first write).
 */
export async function removePartialCheckpoints(root: string): Promise<void> {
  const names = await readdir(root).catch(() => [] as string[]);
  for (const name of names.filter((n) => /^\.step-\d{6,}\.partial$/.test(n))) {
    await rm(join(root, name), { recursive: true, force: true });
  }
}

async function exists(path: string): Promise<boolean> {
  return (await stat(path).catch(() => null)) !== null;
}

async function moveLatest(root: string, name: string): Promise<void> {
  await writeFileAtomic(join(root, LATEST), `${name}\n`, checkpointFault);
}

/**
 * Rank 0, once every rank's files are in `partial` (`beginCheckpoint`): `run.json`, the manifest,
 * the check of every file on disk (a `CheckpointCommitError` naming the step, the rank and the
 * file, before anything is renamed), the rename into place, `latest`, then cleanup. `overwrite`:
 * also remove other runs' steps.
 */
export async function finishCheckpoint(
  root: string,
  partial: string,
  state: RunState,
  overwrite: boolean,
): Promise<void> {
  const name = stepDirName(state.step);
  await writeFileAtomic(join(partial, RUN_STATE), `${JSON.stringify(state)}\n`, checkpointFault);
  await writeStepManifest(partial, state.runId, state.step);
  await syncDirectory(partial);
  faultPoint('manifest');
  await checkBeforeCommit(partial, state.step);
  const final = join(root, name);
  if (!(await exists(final))) {
    await rename(partial, final);
    await syncDirectory(root);
    faultPoint('rename');
  } else {
    const swap = `.${name}.swap`;
    const old = join(root, `.${name}.old`);
    await rm(join(root, swap), { recursive: true, force: true });
    await rm(old, { recursive: true, force: true });
    await rename(partial, join(root, swap));
    await syncDirectory(root);
    await moveLatest(root, swap);
    await rename(final, old);
    faultPoint('swap');
    await rename(join(root, swap), final);
    await syncDirectory(root);
    faultPoint('rename');
  }
  await moveLatest(root, name);
  await cleanup(root, state, overwrite);
}

/** Drop this run's steps but the newest `KEEP` at or below `state.step`, and stale temporaries. */
async function cleanup(root: string, state: RunState, overwrite: boolean): Promise<void> {
  const mine: { name: string; step: number }[] = [];
  for (const name of await readdir(root)) {
    if (/^\.step-\d{6,}\.(partial|swap|old)$/.test(name) || /^\.latest\..+\.partial$/.test(name)) {
      await rm(join(root, name), { recursive: true, force: true });
      continue;
    }
    if (!STEP.test(name)) continue;
    const manifest = await peekStepManifest(join(root, name));
    if (manifest?.runId === state.runId) {
      if (manifest.step <= state.step) mine.push({ name, step: manifest.step });
    } else if (overwrite) {
      await rm(join(root, name), { recursive: true, force: true });
    }
  }
  mine.sort((a, b) => b.step - a.step);
  for (const { name } of mine.slice(KEEP)) {
    await rm(join(root, name), { recursive: true, force: true });
    faultPoint('cleanup');
  }
}

/**
 * The folder `root/latest` names, or null without a `latest` file. A `latest` naming a missing
 * or incomplete folder is a `UsageError` saying what it names.
 */
export async function resolveLatest(root: string): Promise<string | null> {
  const text = await readFile(join(root, LATEST), 'utf8').catch(() => null);
  if (text === null) return null;
  let name = text.trim();
  const swapped = /^\.(step-\d{6,})\.swap$/.exec(name);
  if (swapped !== null && !(await exists(join(root, name)))) name = swapped[1]!;
  const dir = join(root, name);
  const info = await stat(dir).catch(() => null);
  if (info === null || !info.isDirectory()) {
    throw new UsageError(
      `--resume ${root}: ${LATEST} names ${name}, which ${info === null ? 'does not exist' : 'is not a directory'}`,
      { option: '--resume' },
    );
  }
  if ((await peekStepManifest(dir)) === null) {
    throw new UsageError(
      `--resume ${root}: ${LATEST} names ${name}, which is not a complete checkpoint (no readable checkpoint.json)`,
      { option: '--resume' },
    );
  }
  return dir;
}

/**
 * The checkpoint `--resume path` means: `path/latest`'s step; else `path` itself if it is a step
 * folder; else the highest complete step folder in `path` (a crash between a step's rename and
 * `latest`'s leaves no `latest` naming it).
 */
export async function resolveResume(path: string): Promise<string> {
  const latest = await resolveLatest(path);
  if (latest !== null) return latest;
  const manifest = await stat(join(path, STEP_MANIFEST)).catch(() => null);
  if (manifest === null || !manifest.isFile()) {
    let best: { dir: string; step: number } | null = null;
    for (const name of (await readdir(path).catch(() => [] as string[])).filter((n) =>
      STEP.test(n),
    )) {
      const found = await peekStepManifest(join(path, name));
      if (found !== null && (best === null || found.step > best.step)) {
        best = { dir: join(path, name), step: found.step };
      }
    }
    if (best !== null) return best.dir;
    throw new UsageError(
      `--resume ${path}: no checkpoint there (no ${LATEST} file naming one, and no ${STEP_MANIFEST})`,
      { option: '--resume' },
    );
  }
  return path;
}
