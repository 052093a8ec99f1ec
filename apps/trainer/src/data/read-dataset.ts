import { readFile } from 'node:fs/promises';
import { UsageError } from '../errors.js';
import { type Dataset, datasetFromBytes, type TokenizerName } from './dataset.js';
import { Gpt2Tokenizer } from './gpt2-tokenizer.js';

/**
 * Read `path` as a data set (see `datasetFromBytes`), its text tokenized by `tokenizer`; an
 * unreadable file is a `UsageError` naming `--data`.
 */
export async function loadDataset(
  path: string,
  blockSize: number,
  tokenizer: TokenizerName = 'char',
): Promise<Dataset> {
  let bytes: Uint8Array;
  try {
    bytes = await readFile(path);
  } catch (error) {
    throw new UsageError(`--data ${path} cannot be read: ${(error as Error).message}`, {
      option: '--data',
      cause: error,
    });
  }
  const gpt2 = tokenizer === 'gpt2' ? await Gpt2Tokenizer.load() : null;
  return datasetFromBytes(bytes, path, blockSize, gpt2);
}
