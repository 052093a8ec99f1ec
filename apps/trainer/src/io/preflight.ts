import { constants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { UsageError } from '../errors.js';

/**
 * [Note: checks before training]
 * Everything a run could fail on because of its input is checked before the first step, and
 * before anything is written: the input files exist, are files and are readable; each output's
 * nearest existing directory is a writable directory and the output itself is not a directory;
 * the data, the initial weights and the memory estimate fit the model. A failure is a
 * `UsageError` (exit code 2) and leaves every file as it was. Outputs are created only when
 * written, atomically (see [Note: atomic outputs]).
 */

/** `path` must be a readable regular file; `option` names the flag that gave it. */
export async function checkInputFile(path: string, option: string): Promise<void> {
  let info: Awaited<ReturnType<typeof stat>>;
  try {
    info = await stat(path);
  } catch (error) {
    throw new UsageError(`${option} ${path}: no such file`, { option, cause: error });
  }
  if (info.isDirectory()) {
    throw new UsageError(`${option} ${path} is a directory, not a file`, { option });
  }
  try {
    await access(path, constants.R_OK);
  } catch (error) {
    throw new UsageError(`${option} ${path} is not readable`, { option, cause: error });
  }
}

/**
 * `path` must be writable when the run ends: not a directory, not a read-only file, and its
 * nearest existing ancestor a writable directory (missing directories are created at the write).
 */
export async function checkOutputFile(path: string, option: string): Promise<void> {
  const existing = await stat(path).catch(() => null);
  if (existing?.isDirectory()) {
    throw new UsageError(`${option} ${path} is a directory, not a file`, { option });
  }
  if (existing !== null) {
    try {
      await access(path, constants.W_OK);
    } catch (error) {
      throw new UsageError(`${option} ${path} is not writable`, { option, cause: error });
    }
  }
  let dir = dirname(path);
  for (;;) {
    const info = await stat(dir).catch(() => null);
    if (info !== null) {
      if (!info.isDirectory()) {
        throw new UsageError(`${option} ${path} cannot be written: ${dir} is not a directory`, {
          option,
        });
      }
      break;
    }
    const parent = dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  try {
    await access(dir, constants.W_OK | constants.X_OK);
  } catch (error) {
    throw new UsageError(`${option} ${path} cannot be written: ${dir} is not writable`, {
      option,
      cause: error,
    });
  }
}
