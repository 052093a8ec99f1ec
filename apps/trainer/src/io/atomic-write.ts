import { rmSync } from 'node:fs';
import { writeFileAtomic } from '@webshard/fsdp/checkpoint';

/**
 * [Note: atomic outputs]
 * Every output file (`--save`, `--samples`, `--report`, each file of a checkpoint) appears whole
 * or not at all: it is written by `@webshard/fsdp`'s `writeFileAtomic`, a wrapper of tensor-core's
 * one writer ([Note: atomic files] in tensor-core: temporary file beside the target, fsync,
 * rename, directory fsync; a full disk is an error naming the path). A failed write removes its
 * temporary file; so does `removePendingOutputs`,
 * which the CLI calls when SIGINT or SIGTERM ends the process. No `.partial` file outlives the
 * process on any exit path it controls. `--log-jsonl` is the exception: a live log, appended line
 * by line as the steps happen (see [Note: the log of a resumed run]).
 */
const pending = new Set<string>();

/** Write `bytes` to `path` atomically, creating missing parent directories. */
export async function writeFileAtomically(path: string, bytes: Uint8Array | string): Promise<void> {
  await writeFileAtomic(path, bytes, { mkdir: true, pending });
}

/** Remove temporary files of writes still in flight (synchronously: for signal handlers). */
export function removePendingOutputs(): void {
  for (const temporary of pending) rmSync(temporary, { force: true });
  pending.clear();
}
