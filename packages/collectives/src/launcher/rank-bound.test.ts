import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ArgumentError } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import {
  checkRanksPerNode,
  maxRanksPerNode,
  RANK_MIN_BYTES,
  shmWorldBytes,
  thisMachine,
} from './rank-bound.js';

const GiB = 1024 ** 3;
const machine = { memoryBytes: 24 * GiB, cores: 2 };

describe('how many ranks a node can run', () => {
  it('bounds processes by memory at 64 MiB a rank, and threads by their shm world too', () => {
    expect(maxRanksPerNode('processes', machine)).toBe((24 * GiB) / RANK_MIN_BYTES);
    const threads = maxRanksPerNode('threads', machine);
    const need = (n: number) => n * RANK_MIN_BYTES + shmWorldBytes(n)!;
    expect(need(threads)).toBeLessThanOrEqual(24 * GiB);
    expect(need(threads + 1)).toBeGreaterThan(24 * GiB);
    // The rings grow with the square of the ranks: 64 KiB a pair past 32 ranks.
    expect(shmWorldBytes(128)!).toBeGreaterThan(128 * 127 * 65536);
    expect(shmWorldBytes(100_000)).toBeNull();
  });

  it('refuses --nproc-per-node 100000 in one line saying the bound and why', () => {
    const bound = maxRanksPerNode('threads', machine);
    expect(() => checkRanksPerNode(100_000, 'threads', machine)).toThrow(
      new ArgumentError(
        'webshard-run',
        `--nproc-per-node 100000 is more ranks as threads than this machine can run: at most ${bound} (24.0 GiB of memory at 64 MiB per rank at the least, plus their shared-memory world (its rings grow with the square of the ranks)); it has 2 cores, so past 2 ranks share them`,
      ),
    );
    expect(() => checkRanksPerNode(385, 'processes', machine)).toThrow(
      '[webshard-run] --nproc-per-node 385 is more ranks as processes than this machine can run: at most 384 (24.0 GiB of memory at 64 MiB per rank at the least); it has 2 cores, so past 2 ranks share them',
    );
    expect(() => checkRanksPerNode(384, 'processes', machine)).not.toThrow();
  });

  it.each(['threads', 'processes'] as const)(
    'webshard-run --ranks-as %s --nproc-per-node 100000 exits 2 before starting anything',
    async (ranksAs) => {
      const here = dirname(fileURLToPath(import.meta.url));
      const cli = join(here, '..', 'cli', 'webshard-run.ts');
      const child = spawn(
        process.execPath,
        [
          '--conditions=@webshard/source',
          '--import',
          'tsx',
          cli,
          '--nproc-per-node',
          '100000',
          '--ranks-as',
          ranksAs,
          join(here, 'never-started.js'),
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      let errors = '';
      child.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString();
      });
      child.stderr.on('data', (chunk: Buffer) => {
        errors += chunk.toString();
      });
      const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
      const bound = maxRanksPerNode(ranksAs, thisMachine());
      expect({ code, out }).toEqual({ code: 2, out: '' });
      expect(errors.trim().split('\n')).toEqual([
        expect.stringMatching(
          new RegExp(
            `^\\[webshard-run\\] --nproc-per-node 100000 is more ranks as ${ranksAs} than this machine can run: at most ${bound} \\(`,
          ),
        ),
      ]);
    },
    30_000,
  );
});
