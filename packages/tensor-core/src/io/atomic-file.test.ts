import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { CpuBackend } from '../backend/cpu/cpu-backend.js';
import { Tensor } from '../tensor.js';
import { SimulatedCrash, writeAtomically, writeBytesAtomically } from './atomic-file.js';
import { saveSafetensors } from './safetensors-file.js';

// Every `sync()` of a handle opened through node:fs/promises, as the path it was opened on.
const synced: string[] = [];
vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>();
  const open: typeof fs.open = async (path, ...rest) => {
    const handle = await fs.open(path, ...rest);
    const sync = handle.sync.bind(handle);
    handle.sync = async () => {
      synced.push(String(path));
      await sync();
    };
    return handle;
  };
  return { ...fs, open, default: { ...fs, open } };
});

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'webshard-atomic-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});
beforeEach(() => {
  synced.length = 0;
});

describe('writeAtomically', () => {
  it('fsyncs the temporary file and the folder, and leaves only the target', async () => {
    const path = join(dir, 'a.txt');
    await writeBytesAtomically(path, 'hello');
    expect(await readFile(path, 'utf8')).toBe('hello');
    expect(synced.some((file) => file.endsWith('.partial'))).toBe(true);
    expect(synced).toContain(dir);
    expect((await readdir(dir)).filter((file) => file.endsWith('.partial'))).toEqual([]);
  });

  it('a failed write removes its temporary file and keeps the old target whole', async () => {
    const path = join(dir, 'b.txt');
    await writeBytesAtomically(path, 'old');
    const failing = writeAtomically(path, async (handle) => {
      await handle.write(new TextEncoder().encode('half'));
      throw new Error('disk gone');
    });
    await expect(failing).rejects.toThrow('disk gone');
    expect(await readFile(path, 'utf8')).toBe('old');
    expect((await readdir(dir)).filter((file) => file.endsWith('.partial'))).toEqual([]);
  });

  it('a simulated crash leaves its temporary file, as a real one would', async () => {
    const path = join(dir, 'c.txt');
    const crash = writeBytesAtomically(path, 'x', {
      fault: (_file, stage) => {
        if (stage === 'written') throw new SimulatedCrash('crash');
      },
    });
    await expect(crash).rejects.toBeInstanceOf(SimulatedCrash);
    expect((await readdir(dir)).some((file) => file.startsWith('.c.txt.'))).toBe(true);
  });
});

describe('saveSafetensors', () => {
  it('goes through the atomic writer: its file and folder are fsynced', async () => {
    const backend = new CpuBackend();
    const path = join(dir, 'm.safetensors');
    const weight = Tensor.empty(backend, [2, 2], 'f32');
    await saveSafetensors(path, { weight });
    expect(synced.some((file) => file.includes('m.safetensors') && file.endsWith('.partial'))).toBe(
      true,
    );
    expect(synced).toContain(dir);
  });
});
