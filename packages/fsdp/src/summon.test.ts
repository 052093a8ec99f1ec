import { fill_ } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { FsdpConfigError } from './errors.js';
import type { FullyShardedDataParallel } from './fully-sharded.js';
import { Net, SMALL } from './test-support/models.js';
import { wrapNet } from './test-support/parity.js';
import { onLocalRanks } from './test-support/ranks.js';

async function readAll(model: FullyShardedDataParallel): Promise<Map<string, number[]>> {
  return model.summonFullParams(
    async () => {
      const out = new Map<string, number[]>();
      for (const [name, p] of model.namedParameters()) out.set(name, [...(await p.read())]);
      return out;
    },
    { volatile: true },
  );
}

describe('summonFullParams', () => {
  for (const mixedPrecision of [false, true]) {
    it(`gives the full f32 parameters under their names and writes changes back${mixedPrecision ? ' (mixed precision)' : ''}`, async () => {
      await onLocalRanks(2, async (group, backend) => {
        const plain = new Net(SMALL, backend);
        const expected = new Map<string, number[]>();
        for (const [name, p] of plain.namedParameters()) expected.set(name, [...(await p.read())]);
        const model = wrapNet(new Net(SMALL, backend), group, { mixedPrecision }, true);
        const before = await readAll(model);
        expect(before).toEqual(expected);
        await model.summonFullParams(() => {
          for (const [name, p] of model.namedParameters()) {
            expect(p.dtype).toBe('f32');
            if (name === 'head.bias') fill_(p, 7);
          }
        });
        const after = await readAll(model);
        expect(after.get('head.bias')).toEqual([7, 7, 7]);
        expect(after.get('embed.weight')).toEqual(expected.get('embed.weight'));
        for (const unit of model.units()) {
          expect(unit.trainingState).toBe('IDLE');
          expect(unit.paramGroup.isSharded).toBe(true);
        }
      });
    });
  }

  it('volatile discards the changes', async () => {
    await onLocalRanks(2, async (group, backend) => {
      const model = wrapNet(new Net(SMALL, backend), group, {}, true);
      const before = await readAll(model);
      await model.summonFullParams(
        () => {
          for (const [, p] of model.namedParameters()) fill_(p, 3);
        },
        { volatile: true },
      );
      expect(await readAll(model)).toEqual(before);
    });
  });

  it('recurse: false gathers only the unit itself', async () => {
    await onLocalRanks(2, async (group, backend) => {
      const net = new Net(SMALL, backend);
      const model = wrapNet(net, group, {}, true);
      await model.summonFullParams(
        () => {
          expect(net.embed.weight.isFreed).toBe(false);
          const block = net.blocks.at(0) as FullyShardedDataParallel;
          expect(block.module.parameters().every((p) => p.isFreed)).toBe(true);
        },
        { recurse: false, volatile: true },
      );
    });
  });

  it('rank0Only: only rank 0 holds the parameters, and it needs volatile', async () => {
    await onLocalRanks(2, async (group, backend) => {
      const net = new Net(SMALL, backend);
      const model = wrapNet(net, group, {}, true);
      await expect(model.summonFullParams(() => {}, { rank0Only: true })).rejects.toThrow(
        FsdpConfigError,
      );
      await model.summonFullParams(
        () => {
          expect(net.embed.weight.isFreed).toBe(group.rank !== 0);
        },
        { rank0Only: true, volatile: true },
      );
    });
  });

  it('reshards and returns to IDLE when fn throws', async () => {
    await onLocalRanks(2, async (group, backend) => {
      const model = wrapNet(new Net(SMALL, backend), group, {}, true);
      await expect(
        model.summonFullParams(() => {
          throw new Error('inside');
        }),
      ).rejects.toThrow('inside');
      for (const unit of model.units()) {
        expect(unit.trainingState).toBe('IDLE');
        expect(unit.paramGroup.isSharded).toBe(true);
      }
    });
  });
});
