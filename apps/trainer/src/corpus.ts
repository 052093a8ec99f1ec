import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

/**
 * The corpus that ships with the app: 37 of Shakespeare's sonnets (1609, public domain), 23 KB.
 * This file sits directly under `src/` so the relative path is the same from the bundled `dist/`.
 */
export const DEFAULT_CORPUS_PATH = fileURLToPath(new URL('../data/sonnets.txt', import.meta.url));

/** The text of a corpus file (UTF-8), the shipped sonnets by default. */
export function loadCorpus(path: string = DEFAULT_CORPUS_PATH): Promise<string> {
  return readFile(path, 'utf8');
}
