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
import { referenceDecoded } from './test-support/topk-reference.js';
import { closeWorld, createWorld, newSeed } from './test-support/worlds.js';
import { TopkCodec } from './topk-codec.js';

// An odd length: the last block is partial and the shards are padded with zero blocks.
const COUNT = 1000;
const BLOCK = 64;
// topk: 8 of every 64 (6-bit indices + 2 bits: 64 bits, 2 words, + 2 levels = 4 words a chunk).
const DENSITY = 0.125;

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
  if (compression === 'topk') {
    // Each position the mean over the ranks that sent it, each decoded by the float64 reference.
    const sum = new Float64Array(COUNT);
    const senders = new Float64Array(COUNT);
    const k = new TopkCodec(COUNT, null, BLOCK, DENSITY).segments[0]!.tiles[0]!.k;
    for (const input of inputs) {
      const decoded = referenceDecoded(input, BLOCK, k);
      for (let i = 0; i < COUNT; i++) {
        sum[i]! += decoded[i]!;
        if (decoded[i] !== 0) senders[i]!++;
      }
    }
    for (let i = 0; i < COUNT; i++) {
      const want = senders[i] === 0 ? 0 : sum[i]! / senders[i]!;
      expect(Math.abs(got[i]! - want)).toBeLessThan(1e-6);
    }
    // 16 chunks of 4 words from each rank to each other rank.
    for (const r of reports) expect(r.bytesSent).toBe((size - 1) * 16 * 4 * 4);
    return;
  }
  for (let i = 0; i < COUNT; i++) {
    const block = i - (i % BLOCK);
    // Two roundings (each rank's contribution, then the averaged shard).
    const steps = { int8: 127, int4: 7 } as Record<string, number>;
    const bound =
      compression === 'f32'
        ? 1e-6
        : compression === 'bf16'
          ? 2 ** -7 * Math.max(...inputs.map((x) => Math.abs(x[i]!)))
          : (inputs.reduce((s, x) => s + blockMax(x, block), 0) / size / steps[compression]!) *
              0.5 +
            blockMax(got, block) / steps[compression]!;
    expect(Math.abs(got[i]! - exact[i]!)).toBeLessThanOrEqual(bound + 1e-7);
  }
  // Bytes a block: int8 one a value and a scale, int4 half a value and a scale.
  const bytesPerBlock = { f32: 4 * BLOCK, bf16: 2 * BLOCK, int8: BLOCK + 4, int4: BLOCK / 2 + 4 }[
    compression
  ];
  const shardBlocks = Math.ceil(Math.ceil(COUNT / BLOCK) / size);
  const expected =
    compression === 'f32'
      ? Math.round(((2 * (size - 1)) / size) * COUNT * 4)
      : 2 * (size - 1) * shardBlocks * bytesPerBlock;
  for (const r of reports) expect(r.bytesSent).toBe(expected);
}

const COMPRESSIONS: OuterCompression[] = ['f32', 'bf16', 'int8', 'int4', 'topk'];

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
          ...(compression === 'topk' ? { density: DENSITY } : {}),
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
  it.each(['bf16', 'int8', 'topk'] as OuterCompression[])(
    'ws, %s',
    async (compression) => {
      const job = {
        compression,
        seed: newSeed(`average ws ${compression}`),
        count: COUNT,
        blockSize: BLOCK,
        ...(compression === 'topk' ? { density: DENSITY } : {}),
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

  it.each(['int8', 'topk'] as OuterCompression[])(
    'shm (worker threads), %s',
    async (compression) => {
      const job = {
        compression,
        seed: newSeed(`average shm ${compression}`),
        count: COUNT,
        blockSize: BLOCK,
        ...(compression === 'topk' ? { density: DENSITY } : {}),
      };
      const outcomes = await runShm<AverageJob, AverageReport>(3, 'shm-average-worker.ts', job);
      const reports = outcomes.map((o) => {
        expect(o.status, JSON.stringify(o)).toBe('fulfilled');
        return (o as { value: AverageReport }).value;
      });
      await check(job, 3, reports);
    },
    60_000,
  );
});

describe('compressed averaging: errors and residuals', () => {
  it('refuses an unknown compression, a bad block size, density or decay, with exact messages', () => {
    const [group] = createLocalGroups(1);
    const make = (options: object) => () => new CompressedAverager(group!, options);
    expect(make({ compression: 'fp8' })).toThrow(DilocoArgumentError);
    const cases: [object, string, string][] = [
      [
        { compression: 'fp8' },
        'compression',
        "unknown outer compression 'fp8' (f32, bf16, int8, int4, topk)",
      ],
      [{ blockSize: 6 }, 'blockSize', 'blockSize must be a positive multiple of 4, got 6'],
      [
        { compression: 'topk', blockSize: 65540 },
        'blockSize',
        'a topk chunk (blockSize) holds at most 65536 elements (16-bit indices), got 65540',
      ],
      [{ compression: 'topk', density: 0 }, 'density', 'density must be in (0, 1], got 0'],
      [{ compression: 'topk', density: 1.5 }, 'density', 'density must be in (0, 1], got 1.5'],
      [
        { compression: 'topk', density: Number.NaN },
        'density',
        'density must be in (0, 1], got NaN',
      ],
      [
        { compression: 'int8', density: 0.01 },
        'density',
        'density applies to the topk compression, not int8',
      ],
      [
        { compression: 'topk', errorDecay: -0.1 },
        'errorDecay',
        'errorDecay must be in [0, 1], got -0.1',
      ],
      [{ errorDecay: 2 }, 'errorDecay', 'errorDecay must be in [0, 1], got 2'],
    ];
    for (const [options, option, detail] of cases) {
      let thrown: unknown = null;
      try {
        make(options)();
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(DilocoArgumentError);
      expect(thrown).toMatchObject({ option, message: `[CompressedAverager] rank 0: ${detail}` });
    }
    // The defaults for topk: SparseLoCo's chunk, density and decay.
    const topk = new CompressedAverager(group!, { compression: 'topk' });
    expect([topk.blockSize, topk.density, topk.errorDecay]).toEqual([4096, 3 / 128, 0.8]);
    const int4 = new CompressedAverager(group!, { compression: 'int4' });
    expect([int4.blockSize, int4.errorDecay]).toEqual([256, 1]);
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
