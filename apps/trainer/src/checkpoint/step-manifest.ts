import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { UsageError } from '../errors.js';
import { writeFileAtomic } from '@webshard/fsdp/checkpoint';
import { checkpointFault } from '../io/fault-points.js';

/** The manifest of one step's folder: every other file of it, with its size and SHA-256. */
export const STEP_MANIFEST = 'checkpoint.json';
const FORMAT = 'webshard-trainer-checkpoint';

/** One file of a step's folder, as `checkpoint.json` lists it. */
export interface StepFile {
  readonly file: string;
  readonly bytes: number;
  readonly sha256: string;
}

/** `checkpoint.json`: whose checkpoint, which step, every file; and its own SHA-256. */
export interface StepManifest {
  readonly format: typeof FORMAT;
  readonly version: 1;
  readonly runId: string;
  readonly step: number;
  readonly files: readonly StepFile[];
  /** SHA-256 of this JSON (compact) without this field. */
  readonly sha256: string;
}

/**
 * [Note: the step manifest]
 * Every step folder of the trainer ends with `checkpoint.json`, written last into the temporary
 * folder: the run's id, the step, and every other file of the folder (model and optimizer for
 * single, ddp and offload; fsdp's rank files and its own `manifest.json`; `run.json`) with size
 * and SHA-256, and the SHA-256 of the manifest itself. `verifyStep` checks all of it, and that
 * `run.json` (and fsdp's manifest) name the same run and step, before anything of the checkpoint
 * is loaded: one flipped byte in any file, an edited `run.json` or manifest, or a missing file is
 * a `UsageError` naming the file (exit 2), and the run has changed nothing. As PyTorch's DCP keeps
 * its `.metadata` beside the shards, the manifest lives in the folder it describes.
 */
function sha256(bytes: Uint8Array | string): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** The SHA-256 a step manifest carries: of its JSON (compact) without its own `sha256` field. */
export function stepManifestDigest(
  manifest: Omit<StepManifest, 'sha256'> & { sha256?: string },
): string {
  const { sha256: _, ...body } = manifest;
  return sha256(JSON.stringify(body));
}

/** Write `dir/checkpoint.json` listing every other (non-hidden) file of `dir`. */
export async function writeStepManifest(dir: string, runId: string, step: number): Promise<void> {
  const names = (await readdir(dir, { withFileTypes: true }))
    .filter((e) => e.isFile() && !e.name.startsWith('.') && e.name !== STEP_MANIFEST)
    .map((e) => e.name)
    .sort();
  const files: StepFile[] = [];
  for (const file of names) {
    const bytes = await readFile(join(dir, file));
    files.push({ file, bytes: bytes.byteLength, sha256: sha256(bytes) });
  }
  const body = { format: FORMAT, version: 1, runId, step, files } as const;
  const manifest: StepManifest = { ...body, sha256: stepManifestDigest(body) };
  const text = `${JSON.stringify(manifest, null, 1)}\n`;
  await writeFileAtomic(join(dir, STEP_MANIFEST), text, checkpointFault);
}

/** `dir/checkpoint.json` if it is one, unchecked beyond its shape (for cleanup: whose step is it). */
export async function peekStepManifest(dir: string): Promise<StepManifest | null> {
  try {
    const manifest = JSON.parse(await readFile(join(dir, STEP_MANIFEST), 'utf8')) as StepManifest;
    return manifest?.format === FORMAT && typeof manifest.runId === 'string' ? manifest : null;
  } catch {
    return null;
  }
}

/**
 * What is wrong with `entry.file` in `dir` against its size and SHA-256 as `listedIn` records them
 * (missing, unreadable, truncated, corrupted), or null when it checks out.
 */
export async function fileProblem(
  dir: string,
  entry: Pick<StepFile, 'file' | 'bytes' | 'sha256'>,
  listedIn: string,
): Promise<string | null> {
  let bytes: Uint8Array;
  try {
    bytes = await readFile(join(dir, entry.file));
  } catch (error) {
    const code = (error as { code?: string }).code ?? 'unreadable';
    return `listed in ${listedIn} but ${code === 'ENOENT' ? 'missing' : `unreadable (${code})`}`;
  }
  if (bytes.byteLength !== entry.bytes) {
    return `has ${bytes.byteLength} bytes, ${listedIn} says ${entry.bytes} (truncated?)`;
  }
  if (sha256(bytes) !== entry.sha256) return `its SHA-256 differs from ${listedIn} (corrupted)`;
  return null;
}

function refuse(dir: string, file: string, detail: string): never {
  throw new UsageError(`--resume ${join(dir, file)}: ${detail}`, { option: '--resume' });
}

async function readJson<T>(dir: string, file: string): Promise<T> {
  try {
    return (JSON.parse(await readFile(join(dir, file), 'utf8')) ?? {}) as T;
  } catch {
    refuse(dir, file, 'not valid JSON');
  }
}

/**
 * Check step folder `dir` whole (see [Note: the step manifest]): the manifest's own hash, every
 * file's presence, size and hash, and the step and run of `run.json` and fsdp's `manifest.json`
 * against it. Resolves to the manifest; throws a `UsageError` naming the file otherwise.
 */
export async function verifyStep(dir: string, runStateFile: string): Promise<StepManifest> {
  let manifest: StepManifest;
  try {
    manifest = JSON.parse(await readFile(join(dir, STEP_MANIFEST), 'utf8')) as StepManifest;
  } catch (error) {
    const missing = (error as { code?: string }).code === 'ENOENT';
    refuse(dir, STEP_MANIFEST, missing ? 'missing (not a complete checkpoint)' : 'not valid JSON');
  }
  if (manifest?.format !== FORMAT || manifest.version !== 1 || !Array.isArray(manifest.files)) {
    refuse(dir, STEP_MANIFEST, `not a ${FORMAT} manifest of version 1`);
  }
  if (manifest.sha256 !== stepManifestDigest(manifest)) {
    refuse(dir, STEP_MANIFEST, 'its SHA-256 differs from the one it records (edited or corrupted)');
  }
  for (const entry of manifest.files) {
    const problem = await fileProblem(dir, entry, STEP_MANIFEST);
    if (problem !== null) refuse(dir, entry.file, problem);
  }
  const listed = new Set(manifest.files.map((f) => f.file));
  if (!listed.has(runStateFile)) refuse(dir, STEP_MANIFEST, `lists no ${runStateFile}`);
  const state = await readJson<{ step?: unknown; runId?: unknown }>(dir, runStateFile);
  if (state.step !== manifest.step || state.runId !== manifest.runId) {
    refuse(
      dir,
      runStateFile,
      `step ${String(state.step)} of run ${String(state.runId)}, where ${STEP_MANIFEST} says step ${manifest.step} of run ${manifest.runId}`,
    );
  }
  if (listed.has('manifest.json')) {
    const sharded = await readJson<{ step?: unknown; extra?: { runId?: unknown } | null }>(
      dir,
      'manifest.json',
    );
    if (sharded.step !== manifest.step || sharded.extra?.runId !== manifest.runId) {
      refuse(
        dir,
        'manifest.json',
        `step ${String(sharded.step)} of run ${String(sharded.extra?.runId)}, where ${STEP_MANIFEST} says step ${manifest.step} of run ${manifest.runId}`,
      );
    }
  }
  return manifest;
}
