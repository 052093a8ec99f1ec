import { mkdir, mkdtemp, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { CpuBackend } from '../backend/cpu/cpu-backend.js';
import { Tensor } from '../tensor.js';
import { loadSafetensors, readSafetensorsHeader, saveSafetensors } from './safetensors-file.js';
import { SafetensorsError } from './safetensors-format.js';

/**
 * Paths containing this marker get a file handle whose reads and writes fail with the error code
 * after the marker (`...#fail-EIO#...`): a disk that fails half-way, which no chmod can stage
 * (tests may run as root).
 */
const FAIL = /#fail-([A-Z]+)#/;
/**
 * Paths containing this marker cannot be opened: `open` fails with the code after it
 * (`...#deny-EACCES#...`), as for a file without read permission, which chmod cannot stage for
 * root (CI runs as root, so the test used to skip there).
 */
const DENY = /#deny-([A-Z]+)#/;

vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>();
  const failing = (code: string) => () =>
    Promise.reject(Object.assign(new Error(`${code}: injected failure`), { code }));
  return {
    ...fs,
    open: async (path: string, flags: string) => {
      const denied = DENY.exec(path)?.[1];
      if (denied !== undefined) await failing(denied)();
      const handle = await fs.open(path, flags);
      const code = FAIL.exec(path)?.[1];
      if (code === undefined) return handle;
      return new Proxy(handle, {
        get(target, key) {
          if (key === 'read' || key === 'write') return failing(code);
          const value = Reflect.get(target, key, target);
          return typeof value === 'function' ? value.bind(target) : value;
        },
      });
    },
  };
});

const backend = new CpuBackend();
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'webshard-safetensors-io-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function weights(): Record<string, Tensor> {
  const t = Tensor.empty(backend, [4], 'f32');
  backend.write(t.kernel('test'), new Float32Array([1, 2, 3, 4]));
  return { w: t };
}

async function failure(promise: Promise<unknown>): Promise<SafetensorsError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(SafetensorsError.isInstance(error), String(error)).toBe(true);
  return error as SafetensorsError;
}

describe('every io error of the safetensors files is a SafetensorsError naming the file', () => {
  it('a directory, to load or to read the header of', async () => {
    const path = join(dir, 'a-directory.safetensors');
    await mkdir(path);
    const before = backend.memoryStats().allocations;
    const load = await failure(loadSafetensors(path, { backend }));
    expect(load.message).toMatch(`[loadSafetensors] ${path}: cannot read: EISDIR`);
    expect(load.file).toBe(path);
    expect((load.cause as { code?: string }).code).toBe('EISDIR');
    const header = await failure(readSafetensorsHeader(path));
    expect(header.message).toMatch(`[readSafetensorsHeader] ${path}: cannot read: EISDIR`);
    expect(backend.memoryStats().allocations).toBe(before);
  });

  it('a read that fails half-way, having freed what it allocated', async () => {
    const path = join(dir, 'disk#fail-EIO#.safetensors');
    const good = join(dir, 'good.safetensors');
    await saveSafetensors(good, weights());
    await writeFile(path, await readFile(good));
    const before = backend.memoryStats().allocated;
    const error = await failure(loadSafetensors(path, { backend }));
    expect(error.message).toBe(`[loadSafetensors] ${path}: cannot read: EIO: injected failure`);
    expect(backend.memoryStats().allocated).toBe(before);
  });

  it('a save into a missing folder or under a file names the target, not its temporary', async () => {
    const missing = join(dir, 'no-such-folder', 'm.safetensors');
    const error = await failure(saveSafetensors(missing, weights()));
    expect(error.file).toBe(missing);
    expect(error.message).toMatch(`[saveSafetensors] ${missing}: cannot open: ENOENT`);
    await writeFile(join(dir, 'plain-file'), 'x');
    const under = join(dir, 'plain-file', 'm.safetensors');
    const notDir = await failure(saveSafetensors(under, weights()));
    expect(notDir.message).toMatch(`[saveSafetensors] ${under}: cannot open: ENOTDIR`);
  });

  it('a save onto a directory, or a write that fails, leaves no file behind', async () => {
    const onto = join(dir, 'is-a-dir');
    await mkdir(onto);
    const error = await failure(saveSafetensors(onto, weights()));
    expect(error.message).toMatch(`[saveSafetensors] ${onto}: cannot write: EISDIR`);
    const path = join(dir, 'full#fail-ENOSPC#.safetensors');
    const full = await failure(saveSafetensors(path, weights()));
    expect(full.message).toBe(`[saveSafetensors] ${path}: cannot write: ENOSPC: injected failure`);
    const left = await readdir(dir);
    expect(left.filter((f) => f.endsWith('.partial'))).toEqual([]);
    expect(left).not.toContain('full#fail-ENOSPC#.safetensors');
  });

  it('a file that cannot be read (EACCES)', async () => {
    const saved = join(dir, 'locked.safetensors');
    await saveSafetensors(saved, weights());
    const path = join(dir, 'locked#deny-EACCES#.safetensors');
    await rename(saved, path);
    const error = await failure(loadSafetensors(path, { backend }));
    expect(error.message).toMatch(`[loadSafetensors] ${path}: cannot open: EACCES`);
  });
});
