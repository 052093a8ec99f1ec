import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { FileWriteError } from '../errors.js';
import { writeFileAtomic } from './atomic-write.js';

vi.mock('node:fs/promises', async (original) => {
  const actual = await original<typeof import('node:fs/promises')>();
  return { ...actual, open: vi.fn(actual.open) };
});

const dir = mkdtempSync(join(tmpdir(), 'webshard-atomic-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(() => vi.mocked(fs.open).mockClear());

describe('writeFileAtomic', () => {
  it('replaces a file whole, creating parents on request, and tracks the temporary file', async () => {
    const path = join(dir, 'a/b/out.txt');
    const pending = new Set<string>();
    await writeFileAtomic(path, 'first', { mkdir: true, pending });
    await writeFileAtomic(path, new Uint8Array([115, 101, 99]), { pending });
    expect(readFileSync(path, 'utf8')).toBe('sec');
    expect(pending.size).toBe(0);
    expect(readdirSync(join(dir, 'a/b'))).toEqual(['out.txt']);
  });

  it('a full disk is a FileWriteError naming the path; the old file stays, no .partial', async () => {
    const path = join(dir, 'full.bin');
    writeFileSync(path, 'old');
    vi.mocked(fs.open).mockImplementationOnce(async (file, flags) => {
      const handle = await (await vi.importActual<typeof fs>('node:fs/promises')).open(file, flags);
      handle.write = (async () => {
        throw Object.assign(new Error('ENOSPC: no space left on device, write'), {
          code: 'ENOSPC',
        });
      }) as typeof handle.write;
      return handle;
    });
    const error = await writeFileAtomic(path, new Uint8Array(16)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FileWriteError);
    expect((error as Error).message).toBe(
      `[write] ${path}: could not be written: no space left on device (ENOSPC)`,
    );
    expect((error as FileWriteError).errno).toBe('ENOSPC');
    expect(readFileSync(path, 'utf8')).toBe('old');
    expect(readdirSync(dir).filter((f) => f.includes('partial'))).toEqual([]);
  });
});
