import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FsdpStorageError } from '../errors.js';
import { NodeFileStore } from './node-file-store.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fsdp-ssd-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function pattern(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (i * 31 + seed) & 255;
  return out;
}

describe('NodeFileStore', () => {
  it('gives back the bytes written, replaced whole, and counts them', async () => {
    const store = new NodeFileStore(join(dir, 'made-on-first-write'));
    await store.write('unit.flat_param_0.rank1', pattern(1000, 1));
    await store.write('unit.flat_param_0.rank1', pattern(1000, 2));
    const into = new Uint8Array(1000);
    await store.read('unit.flat_param_0.rank1', into);
    expect(into).toEqual(pattern(1000, 2));
    expect(store.stats()).toEqual({ bytesRead: 1000, bytesWritten: 2000, reads: 1, writes: 2 });
    // Written through a temporary file renamed over the old one: none is left behind.
    expect(await readdir(store.dir)).toEqual(['unit.flat_param_0.rank1.shard']);
    store.resetStats();
    expect(store.stats()).toEqual({ bytesRead: 0, bytesWritten: 0, reads: 0, writes: 0 });
  });

  it('reads a file of another size as a typed error naming it, leaving the buffer alone', async () => {
    const store = new NodeFileStore(dir);
    await store.write('a', pattern(12, 0));
    const into = new Uint8Array(16).fill(7);
    const error = await store.read('a', into).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FsdpStorageError);
    expect((error as FsdpStorageError).file).toBe(join(dir, 'a.shard'));
    expect((error as Error).message).toBe(
      `[NodeFileStore.read] file '${join(dir, 'a.shard')}': holds 12 bytes, expected 16 (a shard of another model or world size, or a damaged file)`,
    );
    expect(into).toEqual(new Uint8Array(16).fill(7));
    expect(store.stats().bytesRead).toBe(0);
  });

  it('reads a missing file, or a truncated one, as a typed error naming it', async () => {
    const store = new NodeFileStore(dir);
    await expect(store.read('never', new Uint8Array(4))).rejects.toThrow(
      `[NodeFileStore.read] file '${join(dir, 'never.shard')}': no such file (never written, or removed)`,
    );
    await store.write('b', pattern(8, 3));
    await writeFile(join(dir, 'b.shard'), pattern(5, 3));
    await expect(store.read('b', new Uint8Array(8))).rejects.toThrow(/holds 5 bytes, expected 8/);
    await store.remove('b');
    await store.remove('b');
    await expect(store.read('b', new Uint8Array(8))).rejects.toBeInstanceOf(FsdpStorageError);
  });

  it('refuses a key that is not a plain file name before touching the disk', async () => {
    const store = new NodeFileStore(join(dir, 'untouched'));
    for (const key of ['../escape', 'a/b', '.hidden', '', '-x', 'x'.repeat(201)]) {
      await expect(store.write(key, pattern(4, 0))).rejects.toThrow(FsdpStorageError);
    }
    await expect(store.write('../escape', pattern(4, 0))).rejects.toThrow(
      "[NodeFileStore.write] file '../escape': a shard key is a plain file name",
    );
    expect(await readdir(dir)).toEqual([]);
  });
});
