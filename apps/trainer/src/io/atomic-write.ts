import { rmSync } from 'node:fs';
import { mkdir, open, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/**
 * [Note: atomic outputs]
 * Every output file (`--save`, `--samples`, `--report`) appears whole or not at all: the bytes go
 * to a temporary file beside the target, which is flushed to disk (fsync), renamed over the
 * target, and the directory is synced so the rename survives a crash. A failed write removes its
 * temporary file; so does `removePendingOutputs`, which the CLI calls when SIGINT or SIGTERM
 * ends the process. No `.partial` file outlives the process on any exit path it controls.
 * `--log-jsonl` is the exception: a live log, appended line by line as the steps happen.
 */
const pending = new Set<string>();

/** Write `bytes` to `path` atomically, creating missing parent directories. */
export async function writeFileAtomically(path: string, bytes: Uint8Array | string): Promise<void> {
  const dir = dirname(path);
  await mkdir(dir, { recursive: true });
  const temporary = join(
    dir,
    `.${basename(path)}.${process.pid}.${Math.random().toString(36).slice(2)}.partial`,
  );
  pending.add(temporary);
  try {
    const handle = await open(temporary, 'w');
    try {
      await handle.writeFile(bytes);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temporary, path);
    await syncDirectory(dir);
  } catch (error) {
    await rm(temporary, { force: true });
    throw error;
  } finally {
    pending.delete(temporary);
  }
}

async function syncDirectory(dir: string): Promise<void> {
  try {
    const handle = await open(dir, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  } catch {
    // Some file systems refuse to fsync a directory; the rename itself has happened.
  }
}

/** Remove temporary files of writes still in flight (synchronously: for signal handlers). */
export function removePendingOutputs(): void {
  for (const temporary of pending) rmSync(temporary, { force: true });
  pending.clear();
}
