import {
  type AtomicWriteOptions,
  type FaultHook,
  SimulatedCrash,
  syncDirectory,
  writeBytesAtomically,
} from '@webshard/tensor-core/node';
import { FileWriteError } from '../errors.js';

// The writer itself lives in tensor-core ([Note: atomic files] there); these names stay here so
// fsdp's public surface does not change.
export type { AtomicWriteOptions, FaultHook, WriteStage } from '@webshard/tensor-core/node';
export { SimulatedCrash, syncDirectory };

/**
 * Write `bytes` to `path` atomically with tensor-core's one writer ([Note: atomic files]: temporary
 * file, fsync, rename, directory fsync). Errors of the file system (`ENOSPC`, `EACCES`, ...) come
 * back as a `FileWriteError` naming `path`; a `SimulatedCrash` from a fault hook passes through.
 */
export async function writeFileAtomic(
  path: string,
  bytes: Uint8Array | string,
  options: AtomicWriteOptions | FaultHook = {},
): Promise<void> {
  const settings = typeof options === 'function' ? { fault: options } : options;
  try {
    await writeBytesAtomically(path, bytes, settings);
  } catch (error) {
    if (error instanceof SimulatedCrash) throw error;
    throw FileWriteError.from(path, error);
  }
}
