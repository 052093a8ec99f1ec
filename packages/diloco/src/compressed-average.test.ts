import { createLocalGroups } from '@webshard/collectives';
import { describe, expect, it } from 'vitest';
import { CompressedAverager } from './compressed-average.js';
import {
  type AverageJob,
  type AverageReport,
  averageInput,
  runAverage,
} from './test-support/average-case.js';
import { runShm } from './test-support/launch.js';
import type { OuterCompression } from './compression.js';
import { DilocoArgumentError, DilocoStateError } from './errors.js';
import { closeWorld, createWorld, newSeed } from './test-support/worlds.js';

// An odd length: the last block is partial and the shards are padded with zero blocks.
const COUNT = 1000;
const BLOCK = 64;

/** Largest |x| of each block of `values`. */
function blockMax(values: Float32Array, start: number): number {
  let max = 0;
  for (let i = start; i < Math.min(values.length, start + BLOCK); i++) {
    max = Math.max(max, Math.abs(values[i]!));
  }
  return max;
}

/** Checks the ranks' reports of `job` at world `size`: equal bits, the mean, the bytes. */
async function check(job: AverageJob, size: number, reports: readonly AverageReport[]) {
  const inputs = await Promise.all(Array.from({ length: size }, (_, r) => averageInput(job, r)));
  const { compression } = job;
  const exact = new Float64Array(COUNT);
  for (const input of inputs) for (let i = 0; i < COUNT; i++) exact[i]! += input[i]! / size;
  const outputs = reports.map((r) => Float32Array.from(r.output));
  for (const output of outputs.slice(1)) {
    expect(new Uint32Array(output.buffer)).toEqual(new Uint32Array(outputs[0]!.buffer));
  }
  const got = outputs[0]!;
  for (let i = 0; i < COUNT; i++) {
    const block = i - (i % BLOCK);
    // Two roundings (each rank's contribution, then the averaged shard).
    const bound =
      compression === 'f32'
        ? 1e-6
        : compression === 'bf16'
          ? 2 ** -7 * Math.max(...inputs.map((x) => Math.abs(x[i]!)))
          : (inputs.reduce((s, x) => s + blockMax(x, block), 0) / size / 127) * 0.5 +
            blockMax(got, block) / 127;
    expect(Math.abs(got[i]! - exact[i]!)).toBeLessThanOrEqual(bound + 1e-7);
  }
  const bytesPerElement = { f32: 4, bf16: 2, int8: 1 + 4 / BLOCK }[compression];
  const shardBlocks = Math.ceil(Math.ceil(COUNT / BLOCK) / size);
  const expected =
    compression === 'f32'
      ? Math.round(((2 * (size - 1)) / size) * COUNT * 4)
      : 2 * (size - 1) * shardBlocks * BLOCK * bytesPerElement;
  for (const r of reports) expect(r.bytesSent).toBe(expected);
}

const COMPRESSIONS: OuterCompression[] = ['f32', 'bf16', 'int8'];

describe.each(['local', 'tcp'] as const)('compressed averaging over %s', (transport) => {
  describe.each([2, 3])('world %i', (size) => {
    it.each(COMPRESSIONS)(
      '%s: every rank gets the same bits, the mean within the codec error',
      async (compression) => {
        const job = {
          compression,
          seed: newSeed(`average ${transport} ${size} ${compression}`),
          count: COUNT,
          blockSize: BLOCK,
        };
        const groups = await createWorld(transport, size);
        try {
          await check(job, size, await Promise.all(groups.map((g) => runAverage(g, job))));
        } finally {
          await closeWorld(groups);
        }
      },
      30_000,
    );
  });
});

describe('compressed averaging over ws and shm (world 3)', () => {
  it.each(['bf16', 'int8'] as OuterCompression[])(
    'ws, %s',
    async (compression) => {
      const job = {
        compression,
        seed: newSeed(`average ws ${compression}`),
        count: COUNT,
        blockSize: BLOCK,
      };
      const groups = await createWorld('ws', 3);
      try {
        await check(job, 3, await Promise.all(groups.map((g) => runAverage(g, job))));
      } finally {
        await closeWorld(groups);
      }
    },
    30_000,
  );

  it('shm (worker threads), int8', async () => {
    const job = {
      compression: 'int8' as const,
      seed: newSeed('average shm int8'),
      count: COUNT,
      blockSize: BLOCK,
    };
    const outcomes = await runShm<AverageJob, AverageReport>(3, 'shm-average-worker.ts', job);
    const reports = outcomes.map((o) => {
      expect(o.status, JSON.stringify(o)).toBe('fulfilled');
      return (o as { value: AverageReport }).value;
    });
    await check(job, 3, reports);
  }, 60_000);
});

describe('compressed averaging: errors and residuals', () => {
  it('refuses an unknown compression and a block size that is not a multiple of 4', () => {
    const [group] = createLocalGroups(1);
    expect(() => new CompressedAverager(group!, { compression: 'fp8' as never })).toThrow(
      DilocoArgumentError,
    );
    expect(() => new CompressedAverager(group!, { compression: 'fp8' as never })).toThrow(
      "[CompressedAverager] rank 0: unknown compression 'fp8' (f32, bf16 or int8)",
    );
    expect(() => new CompressedAverager(group!, { blockSize: 6 })).toThrow(
      '[CompressedAverager] rank 0: blockSize must be a positive multiple of 4, got 6',
    );
  });

  it('refuses a length that differs from the residual it keeps', async () => {
    const groups = await createWorld('local', 2);
    const averagers = groups.map((g) => new CompressedAverager(g, { compression: 'int8' }));
    await Promise.all(averagers.map((a) => a.average(new Float32Array(10).fill(0.5))));
    await expect(averagers[0]!.average(new Float32Array(11))).rejects.toThrow(DilocoStateError);
    await expect(averagers[0]!.average(new Float32Array(11))).rejects.toThrow(
      '[average] rank 0: averaging 11 elements, but the residual kept from earlier rounds has 10',
    );
    await closeWorld(groups);
  });
});
