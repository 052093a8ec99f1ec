import { createLocalGroups, type ProcessGroup } from '@webshard/collectives';
import { createCpuBackend, GPT, RandomGenerator, tensor } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { parseOptions } from '../cli/options.js';
import type { TrainConfig } from '../config.js';
import { prepareModel } from './prepare.js';

// `--prefetch n` is FSDP's `limitAllGathers` on every unit the trainer wraps ([Note: prefetching
// several units ahead] in fsdp): counted as the all-gathers a rank has issued when the first
// block computes, in the second step (the first records the units' order). The trainer shards
// each parameter on its own (`flattenParameters: false`): a unit's gather is one per parameter.
const FLAGS = [
  ...['--data', 'x.bin', '--vocab-size', '32', '--block-size', '8', '--n-layer', '4'],
  ...['--n-head', '2', '--n-embd', '16', '--batch-size', '4'],
  ...['--strategy', 'fsdp', '--world-size', '2', '--transport', 'local'],
];

async function gathersBeforeFirstBlock(
  extra: string[],
): Promise<{ gathers: number; perBlock: number; losses: number[] }> {
  const groups = createLocalGroups(2, { timeoutMs: 30_000 });
  const ranks = await Promise.all(
    groups.map(async (group: ProcessGroup) => {
      const config = parseOptions([...FLAGS, ...extra], '/tmp') as TrainConfig;
      const backend = createCpuBackend();
      const model = new GPT(
        { vocabSize: 32, blockSize: 8, nLayer: 4, nHead: 2, nEmbd: 16, dropout: 0, bias: true },
        { backend, generator: new RandomGenerator(1) },
      );
      const first = model.blocks.at(0)!;
      const prepared = prepareModel(model, config, group, backend);
      const log: string[] = [];
      const allGather = group.allGather.bind(group);
      group.allGather = (...args: Parameters<typeof allGather>) => {
        log.push('allGather');
        return allGather(...args);
      };
      let atFirst = -1;
      first.registerForwardPreHook(() => {
        atFirst = log.length;
        return undefined;
      });
      const ids = (k: number) =>
        tensor(
          Array.from({ length: 16 }, (_, i) => (i * 7 + k + group.rank) % 32),
          { backend, dtype: 'i32', shape: [2, 8] },
        );
      const losses: number[] = [];
      for (const step of [0, 1]) {
        log.length = 0;
        const { loss } = await prepared.forward(ids(step), ids(step + 1));
        await loss!.backward();
        losses.push((await loss!.read())[0]!);
        loss!.free();
      }
      return { gathers: atFirst, perBlock: first.parameters().length, losses };
    }),
  );
  for (const group of groups) await group.close();
  const { gathers, perBlock } = ranks[0]!;
  return { gathers, perBlock, losses: ranks.flatMap((r) => r.losses) };
}

describe('--prefetch', () => {
  it('gathers that many blocks ahead of the one computing, with the same losses', async () => {
    // The root's gathers and the first block's, then the blocks prefetched ahead of it.
    const none = await gathersBeforeFirstBlock(['--prefetch', '0']);
    const { perBlock } = none;
    expect(perBlock).toBe(12);
    const root = none.gathers - perBlock;
    expect(root).toBeGreaterThan(0);
    const one = await gathersBeforeFirstBlock([]);
    expect(one.gathers).toBe(root + 2 * perBlock);
    const three = await gathersBeforeFirstBlock(['--prefetch', '3']);
    expect(three.gathers).toBe(root + 4 * perBlock);
    expect(three.losses).toEqual(one.losses);
    expect(none.losses).toEqual(one.losses);
  });
});
