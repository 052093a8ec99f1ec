/**
 * bench:volunteers's corpus, made without a network: the shipped sonnets, then this repository's
 * own prose and code (every `.md` and `.ts` under `docs/`, `packages/*` and `apps/*`, outside
 * `node_modules`, `dist` and `api`, in sorted order: about 5 MB), cut at `maxBytes`. The same
 * checkout gives the same bytes.
 */
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { Gpt2Tokenizer } from '../src/data/gpt2-tokenizer.js';

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

/**
 * `text` as nanoGPT's `prepare.py` writes GPT-2 tokens (little-endian uint16, no header; `encode_ordinary`),
 * beside it with `.bin` for `.txt`; returns that path. The trainer reads it with `--data X.bin
 * --tokenizer gpt2`, the same tokens it would encode from the text.
 */
export async function writeGpt2Tokens(text: string): Promise<string> {
  const tokens = (await Gpt2Tokenizer.load()).encode(await readFile(text, 'utf8'));
  const bytes = new Uint8Array(tokens.length * 2);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < tokens.length; i++) view.setUint16(2 * i, tokens[i]!, true);
  const path = text.replace(/\.txt$/, '.bin');
  await writeFile(path, bytes);
  console.log(`corpus: ${tokens.length} GPT-2 tokens, ${path}`);
  return path;
}
