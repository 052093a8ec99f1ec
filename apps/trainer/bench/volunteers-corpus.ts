/**
 * bench:volunteers's corpus, made without a network: the shipped sonnets, then this repository's
 * own prose and code (every `.md` and `.ts` under `docs/`, `packages/*` and `apps/*`, outside
 * `node_modules`, `dist` and `api`, in sorted order: about 5 MB), cut at `maxBytes`. The same
 * checkout gives the same bytes.
 */
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';

const ROOT = join(import.meta.dirname, '..', '..', '..');
const SKIP = new Set(['node_modules', 'dist', 'api', '.turbo', 'bench-results']);

async function walk(dir: string, out: string[]): Promise<void> {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (SKIP.has(entry.name) || entry.name.startsWith('.')) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) await walk(path, out);
    else if (/\.(md|ts)$/.test(entry.name)) out.push(path);
  }
}

/** Writes the corpus to `path` (at most `maxBytes` bytes) and returns its size in bytes. */
export async function writeRepositoryCorpus(path: string, maxBytes: number): Promise<number> {
  const files: string[] = [];
  for (const top of ['docs', 'packages', 'apps']) await walk(join(ROOT, top), files);
  files.sort((a, b) => relative(ROOT, a).localeCompare(relative(ROOT, b)));
  const parts = [await readFile(join(ROOT, 'apps', 'trainer', 'data', 'sonnets.txt'), 'utf8')];
  let bytes = Buffer.byteLength(parts[0]!);
  for (const file of files) {
    if (bytes >= maxBytes) break;
    const text = await readFile(file, 'utf8');
    parts.push(text);
    bytes += Buffer.byteLength(text) + 2;
  }
  const corpus = Buffer.from(parts.join('\n\n')).subarray(0, maxBytes);
  await writeFile(path, corpus);
  return corpus.length;
}
