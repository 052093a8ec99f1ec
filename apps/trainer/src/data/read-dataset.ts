import { readFile } from 'node:fs/promises';
import { UsageError } from '../errors.js';
import { type Dataset, datasetFromBytes } from './dataset.js';

/**
 * Read `path` as a data set (see `datasetFromBytes`); an unreadable file is a `UsageError` naming
 * `--data`.
 */
export async function loadDataset(path: string, blockSize: number): Promise<Dataset> {
  let bytes: Uint8Array;
  try {
    bytes = await readFile(path);
  } catch (error) {
    throw new UsageError(`--data ${path} cannot be read: ${(error as Error).message}`, {
      option: '--data',
      cause: error,
    });
  }
  return datasetFromBytes(bytes, path, blockSize);
}
