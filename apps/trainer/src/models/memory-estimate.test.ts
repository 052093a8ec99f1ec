import { describe, expect, it } from 'vitest';
import { parseOptions } from '../cli/options.js';
import type { TrainConfig } from '../config.js';
import { estimateBytes } from './memory-estimate.js';

// GPT-2 small as the estimate counts it (a vocabulary of 50304, 1024 positions: 124 475 904
// parameters): a block is 7 087 872 of them, the root (embeddings and the last norm) 39 421 440.
const GPT2 = [
  ...['--data', 'x.bin', '--vocab-size', '50304', '--block-size', '1024', '--n-layer', '12'],
  ...['--n-head', '12', '--n-embd', '768', '--batch-size', '8'],
];
const BLOCK = 7_087_872;
const ROOT = 39_421_440;
const fsdp2 = (...more: string[]) =>
  parseOptions(
    [...GPT2, '--strategy', 'fsdp', '--world-size', '2', '--transport', 'shm', ...more],
    '/tmp',
  ) as TrainConfig;

describe("the memory estimate counts FSDP's reduce-scatter bucket", () => {
  it("at 2 ranks a block's shard (14.18 MB) fits fairscale's 25 MiB bucket alone: one block's gradient and its copy wait at a time", () => {
    // A bucket of 0.01 MiB: every shard is larger and goes at once, so nothing waits.
    const none = estimateBytes(fsdp2('--bucket-mb', '0.01'), 50304);
    expect(estimateBytes(fsdp2(), 50304) - none).toBe(2 * BLOCK * 4);
    expect(estimateBytes(fsdp2('--bucket-mb', '25'), 50304) - none).toBe(2 * BLOCK * 4);
  });

  it('a 100 MiB bucket holds 7 blocks before it goes; the root, 78.8 MB a shard, waits alone after the last 5', () => {
    const none = estimateBytes(fsdp2('--bucket-mb', '0.01'), 50304);
    const most = Math.max(7 * 2 * BLOCK * 4, 2 * ROOT * 4);
    expect(estimateBytes(fsdp2('--bucket-mb', '100'), 50304) - none).toBe(most);
  });

  it('--prefetch 3 holds two more blocks in full than the default; 0 one fewer', () => {
    const base = estimateBytes(fsdp2(), 50304);
    expect(estimateBytes(fsdp2('--prefetch', '3'), 50304) - base).toBe(2 * BLOCK * 4);
    expect(estimateBytes(fsdp2('--prefetch', '0'), 50304) - base).toBe(-BLOCK * 4);
  });

  it('DDP and one process hold no FSDP bucket', () => {
    const ddp = parseOptions(
      [...GPT2, '--strategy', 'ddp', '--world-size', '2', '--transport', 'shm'],
      '/tmp',
    ) as TrainConfig;
    const small = parseOptions(
      [
        ...GPT2,
        '--strategy',
        'ddp',
        '--world-size',
        '2',
        '--transport',
        'shm',
        '--bucket-mb',
        '0.01',
      ],
      '/tmp',
    ) as TrainConfig;
    expect(estimateBytes(ddp, 50304)).toBe(estimateBytes(small, 50304));
  });
});
