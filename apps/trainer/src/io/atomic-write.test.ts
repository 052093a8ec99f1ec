import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FileWriteError } from '@webshard/fsdp/checkpoint';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeFileAtomically } from './atomic-write.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'webshard-atomic-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('writeFileAtomically', () => {
  it('replaces a file whole, creating missing directories, leaving no temporary file', async () => {
    await writeFileAtomically(join(dir, 'a/b/out.txt'), 'first');
    await writeFileAtomically(join(dir, 'a/b/out.txt'), new Uint8Array([115, 101, 99]));
    expect(await readFile(join(dir, 'a/b/out.txt'), 'utf8')).toBe('sec');
    expect(await readdir(join(dir, 'a/b'))).toEqual(['out.txt']);
  });

  it('leaves the old file and no .partial when the rename fails', async () => {
    await mkdir(join(dir, 'target-is-a-dir/inside'), { recursive: true });
    await writeFile(join(dir, 'target-is-a-dir/inside/keep'), 'x');
    const target = join(dir, 'target-is-a-dir');
    const error = await writeFileAtomically(target, 'data').catch((e: unknown) => e);
    // the one writer (through fsdp): the error names the path (see [Note: atomic files]).
    expect(error).toBeInstanceOf(FileWriteError);
    expect((error as Error).message).toMatch(
      new RegExp(`^\\[write\\] ${target}: could not be written: E(ISDIR|NOTEMPTY)`),
    );
    expect((await readdir(dir)).filter((f) => f.includes('partial'))).toEqual([]);
    expect(await readFile(join(dir, 'target-is-a-dir/inside/keep'), 'utf8')).toBe('x');
  });
});
