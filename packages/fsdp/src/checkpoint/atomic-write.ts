import { randomBytes } from 'node:crypto';
import { open, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/** Points of a write where a test may simulate a crash (the hook throws; nothing is cleaned up). */
export type WriteStage = 'opened' | 'written' | 'synced' | 'renamed';

/** Called at each stage of every file written; throwing there leaves things as a crash would. */
export type FaultHook = (file: string, stage: WriteStage) => void;

/** A crash simulated by a `FaultHook`: the writer stops where it is and cleans nothing up. */
export class SimulatedCrash extends Error {}

/**
 * Write `bytes` to `path` atomically: a temporary file beside it (`.<name>.<random>.tmp`), fsync,
 * rename over `path`, fsync of the directory. Readers see the old file or the new one, never a
 * half-written one; a crash leaves at most a `.tmp` file behind, which nothing reads.
 */
export async function writeFileAtomic(
  path: string,
  bytes: Uint8Array,
  fault?: FaultHook,
): Promise<void> {
  const temporary = join(dirname(path), `.${basename(path)}.${randomBytes(6).toString('hex')}.tmp`);
  const handle = await open(temporary, 'w');
  let closed = false;
  try {
    fault?.(path, 'opened');
    let written = 0;
    while (written < bytes.byteLength) {
      const { bytesWritten } = await handle.write(bytes, written, bytes.byteLength - written);
      written += bytesWritten;
    }
    fault?.(path, 'written');
    await handle.sync();
    fault?.(path, 'synced');
    await handle.close();
    closed = true;
    await rename(temporary, path);
    fault?.(path, 'renamed');
    await syncDirectory(dirname(path));
  } catch (error) {
    if (!closed) await handle.close().catch(() => {});
    if (!(error instanceof SimulatedCrash)) await rm(temporary, { force: true });
    throw error;
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
