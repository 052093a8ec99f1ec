import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Backend, createCpuBackend } from '@webshard/tensor-core';
import { afterAll, describe, expect, it } from 'vitest';
import { parseOptions } from '../cli/options.js';
import { TINY } from '../test-support/cli.js';
import { setUpRun } from './set-up.js';

// A set-up that fails once its backend exists gives the backend back: an elastic member whose
// set-up a lost member fails builds the run again in the next world (run/elastic-epoch.ts), and
// each failed try would otherwise keep a backend (a WebGPU device, a matmul's worker threads).

const dir = await mkdtemp(join(tmpdir(), 'webshard-set-up-'));
afterAll(() => rm(dir, { recursive: true, force: true }));

describe('setUpRun', () => {
  it('that fails after making its backend (a bad --init, read after it) disposes of it, and throws what failed', async () => {
    await writeFile(join(dir, 'bad.safetensors'), 'not a safetensors file');
    const config = parseOptions([...TINY, '--init', 'bad.safetensors'], dir);
    if (config === 'help') throw new Error('unreachable');
    const made: { backend: Backend; disposed: boolean }[] = [];
    const io = {
      stdout: () => {},
      isTTY: false,
      createBackend: async () => {
        const backend = createCpuBackend();
        const entry = { backend, disposed: false };
        const dispose = backend.dispose.bind(backend);
        backend.dispose = () => {
          entry.disposed = true;
          dispose();
        };
        made.push(entry);
        return backend;
      },
    };
    await expect(setUpRun(config, io, null)).rejects.toThrow(
      `--init ${join(dir, 'bad.safetensors')} is not a valid safetensors file: `,
    );
    expect(made.map((m) => m.disposed)).toEqual([true]);
  });
});
