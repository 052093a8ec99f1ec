import { randomBytes } from 'node:crypto';
import { mkdir, open, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { FileWriteError } from '../errors.js';

/** Points of a write where a test may simulate a crash (the hook throws; nothing is cleaned up). */
export type WriteStage = 'opened' | 'written' | 'synced' | 'renamed';

/** Called at each stage of every file written; throwing there leaves things as a crash would. */
export type FaultHook = (file: string, stage: WriteStage) => void;

/** A crash simulated by a `FaultHook`: the writer stops where it is and cleans nothing up. */
export class SimulatedCrash extends Error {}

/** How `writeFileAtomic` writes. */
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
 * Write `bytes` to `path` atomically: a temporary file beside it (`.<name>.<random>.partial`),
 * fsync, rename over `path`, fsync of the directory. Readers see the old file or the new one, never
 * a half-written one; a failed write removes its temporary file, and a crash leaves at most a
 * `.partial` file behind, which nothing reads. Errors of the file system (`ENOSPC`, `EACCES`, ...)
 * come back as a `FileWriteError` naming `path`. The one writer of the repository: the trainer's
 * outputs and checkpoints go through it too.
 */
export async function writeFileAtomic(
  path: string,
  bytes: Uint8Array | string,
  options: AtomicWriteOptions | FaultHook = {},
): Promise<void> {
  const {
    fault,
    pending,
    mkdir: makeParents,
  } = typeof options === 'function'
    ? { fault: options, pending: undefined, mkdir: false }
    : options;
  const data = typeof bytes === 'string' ? new TextEncoder().encode(bytes) : bytes;
  const dir = dirname(path);
  const temporary = join(dir, `.${basename(path)}.${randomBytes(6).toString('hex')}.partial`);
  pending?.add(temporary);
  let handle: Awaited<ReturnType<typeof open>> | null = null;
  try {
    if (makeParents) await mkdir(dir, { recursive: true });
    handle = await open(temporary, 'w');
    fault?.(path, 'opened');
    let written = 0;
    while (written < data.byteLength) {
      const { bytesWritten } = await handle.write(data, written, data.byteLength - written);
      written += bytesWritten;
    }
    fault?.(path, 'written');
    await handle.sync();
    fault?.(path, 'synced');
    const closing = handle;
    handle = null;
    await closing.close();
    await rename(temporary, path);
    fault?.(path, 'renamed');
    await syncDirectory(dir);
  } catch (error) {
    if (handle !== null) await handle.close().catch(() => {});
    if (error instanceof SimulatedCrash) throw error;
    await rm(temporary, { force: true }).catch(() => {});
    throw FileWriteError.from(path, error);
  } finally {
    pending?.delete(temporary);
  }
}

/** fsync a directory, so a rename in it is durable (a no-op where directories cannot be opened). */
export async function syncDirectory(dir: string): Promise<void> {
  let handle: Awaited<ReturnType<typeof open>> | null = null;
  try {
    handle = await open(dir, 'r');
    await handle.sync();
  } catch {
    // Some platforms (Windows) cannot fsync a directory; the rename is still atomic there.
  } finally {
    await handle?.close().catch(() => {});
  }
}
