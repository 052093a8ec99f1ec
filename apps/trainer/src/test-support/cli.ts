import { createHash } from 'node:crypto';
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { type CliIO, type CliOutcome, main } from '../run-cli.js';

/** A tiny GPT on the CPU for 3 steps: the flags of every in-process CLI test that trains. */
export const TINY = [
  ...['--backend', 'cpu', '--n-layer', '1', '--n-head', '2', '--n-embd', '16'],
  ...['--block-size', '8', '--batch-size', '4', '--steps', '3', '--sample-length', '0'],
];

/** `main` with captured output, run in `cwd`. */
export async function runMain(
  argv: readonly string[],
  cwd: string,
): Promise<CliOutcome & { stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const io: CliIO = {
    stdout: (t) => {
      stdout += t;
    },
    stderr: (t) => {
      stderr += t;
    },
    isTTY: false,
    cwd,
  };
  const outcome = await main(argv, io);
  return { ...outcome, stdout, stderr };
}

/** Every file under `dir` with its size, modification time and content hash. */
export async function snapshot(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    const path = join(entry.parentPath, entry.name);
    if (!entry.isFile()) {
      out[path] = 'dir';
      continue;
    }
    const info = await stat(path);
    const hash = createHash('sha256')
      .update(await readFile(path))
      .digest('hex');
    out[path] = `${info.size} ${info.mtimeMs} ${hash}`;
  }
  return out;
}
