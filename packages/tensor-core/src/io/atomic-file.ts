import type { FileHandle } from 'node:fs/promises';
import { nodeFs } from '#platform';

/** Points of a write where a test may simulate a crash (the hook throws; nothing is cleaned up). */
export type WriteStage = 'opened' | 'written' | 'synced' | 'renamed';

/** Called at each stage of every file written; throwing there leaves things as a crash would. */
export type FaultHook = (file: string, stage: WriteStage) => void;

/** A crash simulated by a `FaultHook`: the writer stops where it is and cleans nothing up. */
export class SimulatedCrash extends Error {}

/**
 * What `writeAtomically`'s callback may do with the temporary file: write bytes at a position (a
 * `FileHandle` of node:fs, named structurally so the `/node` entry's declarations need no Node
 * types, which browser consumers lack).
 */
export interface AtomicFileHandle {
  write(
    buffer: Uint8Array,
    offset?: number,
    length?: number,
    position?: number | null,
  ): Promise<{ bytesWritten: number }>;
}

/** How an atomic write goes. */
export interface AtomicWriteOptions {
  /** Tests: simulate a crash at a stage of the write. */
  readonly fault?: FaultHook;
  /** Create missing parent directories first. */
  readonly mkdir?: boolean;
  /**
   * Holds the temporary file's path while the write is in flight, so a signal handler can remove
   * it synchronously (the trainer's `removePendingOutputs`).
   */
  readonly pending?: Set<string>;
}

/**
 * [Note: atomic files]
 * The one atomic writer of the repository (fsdp's `writeFileAtomic`, the trainer's outputs and
 * tensor-core's `saveSafetensors` all go through it): `write` fills a temporary file beside `path`
 * (`.<name>.<random>.partial`), which is fsynced, renamed over `path`, and the directory fsynced.
 * Readers see the old file or the new one, never a half-written one; a failed write removes its
 * temporary file, and a crash leaves at most a `.partial` file behind, which nothing reads. Errors
 * propagate unchanged (after the clean-up), so each caller names them its own way (fsdp's
 * `FileWriteError`, tensor-core's `SafetensorsError`). A `SimulatedCrash` thrown by `fault` skips
 * the clean-up, as a real crash would. node:fs comes through `#platform` ([Note: the platform
 * module]), so browser bundles never load it.
 */
export async function writeAtomically(
  path: string,
  write: (handle: AtomicFileHandle) => Promise<void>,
  options: AtomicWriteOptions = {},
): Promise<void> {
  const { fault, pending, mkdir: makeParents } = options;
  const fs = await nodeFs('writeAtomically');
  const { dir, name } = splitPath(path);
  const random = Math.random().toString(36).slice(2, 10) + Date.now().toString(36);
  const temporary = `${dir}${dir === '' ? '' : '/'}.${name}.${random}.partial`;
  pending?.add(temporary);
  let handle: FileHandle | null = null;
  try {
    if (makeParents && dir !== '') await fs.mkdir(dir, { recursive: true });
    handle = await fs.open(temporary, 'w');
    fault?.(path, 'opened');
    await write(handle);
    fault?.(path, 'written');
    await handle.sync();
    fault?.(path, 'synced');
    const closing = handle;
    handle = null;
    await closing.close();
    await fs.rename(temporary, path);
    fault?.(path, 'renamed');
    await syncDirectory(dir === '' ? '.' : dir);
  } catch (error) {
    if (handle !== null) await handle.close().catch(() => undefined);
    if (!(error instanceof SimulatedCrash)) {
      await fs.rm(temporary, { force: true }).catch(() => undefined);
    }
    throw error;
  } finally {
    pending?.delete(temporary);
  }
}

/** Write all of `bytes` (or a string, as UTF-8) to `path` with `writeAtomically`. */
export async function writeBytesAtomically(
  path: string,
  bytes: Uint8Array | string,
  options: AtomicWriteOptions = {},
): Promise<void> {
  const data = typeof bytes === 'string' ? new TextEncoder().encode(bytes) : bytes;
  await writeAtomically(
    path,
    async (handle) => {
      let written = 0;
      while (written < data.byteLength) {
        const { bytesWritten } = await handle.write(data, written, data.byteLength - written);
        written += bytesWritten;
      }
    },
    options,
  );
}

/** fsync a directory, so a rename in it is durable (a no-op where directories cannot be opened). */
export async function syncDirectory(dir: string): Promise<void> {
  const fs = await nodeFs('syncDirectory');
  let handle: FileHandle | null = null;
  try {
    handle = await fs.open(dir, 'r');
    await handle.sync();
  } catch {
    // Some platforms (Windows) cannot fsync a directory; the rename is still atomic there.
  } finally {
    await handle?.close().catch(() => undefined);
  }
}

/** `path`'s directory ('' when it has none) and last component, for either separator. */
function splitPath(path: string): { dir: string; name: string } {
  const cut = Math.max(path.lastIndexOf('/'), path.lastIndexOf('\\'));
  return cut < 0 ? { dir: '', name: path } : { dir: path.slice(0, cut), name: path.slice(cut + 1) };
}
