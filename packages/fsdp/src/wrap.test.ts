import { Linear } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { FsdpConfigError } from './errors.js';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { meanLosses, trainSingle } from './test-support/parity.js';
import { Block, Net, SMALL } from './test-support/models.js';
import { onLocalRanks } from './test-support/ranks.js';
import {
  autoWrap,
  enableWrap,
  moduleClassAutoWrapPolicy,
  sizeBasedAutoWrapPolicy,
  wrap,
} from './wrap.js';

function unitNames(model: FullyShardedDataParallel): string[] {
  return model.units().map((u) => u.unitName);
}

describe('autoWrap', () => {
  it('by module class: one unit per block, the root around the rest', async () => {
    await onLocalRanks(2, async (group, backend) => {
      const model = autoWrap(new Net(SMALL, backend), moduleClassAutoWrapPolicy([Block]), {
        group,
      });
      const [batch] = (await import('./test-support/models.js')).makeBatches(backend, SMALL, 1, 4);
      const { slice } = await import('./test-support/models.js');
      const [x, y] = slice(backend, batch!, 0, 2);
      const loss = await model.call(x, y);
      await loss.backward();
      expect(unitNames(model)).toEqual(['<root>', 'blocks.0', 'blocks.1', 'blocks.2']);
    });
  });

  it('by size: modules of at least minNumParams elements (not containers)', async () => {
    await onLocalRanks(1, async (group, backend) => {
      // A block has 8*12+12 + 12*8+8 = 212 elements; its Linears 108 and 104.
      const model = autoWrap(new Net(SMALL, backend), sizeBasedAutoWrapPolicy(150), { group });
      const units = model.units();
      expect(units.map((u) => u.module.typeName)).toEqual(['Net', 'Block', 'Block', 'Block']);
      const smaller = autoWrap(new Net(SMALL, backend), sizeBasedAutoWrapPolicy(100), { group });
      // fc1 (108) and fc2 (104) of each block; not embed (48) or head (27).
      expect(smaller.units().map((u) => u.unitName)).toEqual([
        '<root>',
        'blocks.0.fc1',
        'blocks.0.fc2',
        'blocks.1.fc1',
        'blocks.1.fc2',
        'blocks.2.fc1',
        'blocks.2.fc2',
      ]);
      expect(() => sizeBasedAutoWrapPolicy(-1)).toThrow(FsdpConfigError);
    });
  });

  it('wraps nested units whose parameters were replaced (mixed precision)', async () => {
    await onLocalRanks(1, async (group, backend) => {
      const model = autoWrap(new Net(SMALL, backend), sizeBasedAutoWrapPolicy(100), {
        group,
        mixedPrecision: true,
      });
      expect(model.units()).toHaveLength(7);
    });
  });

  it('keeps a tied weight in the smallest unit with every use (the root here)', async () => {
    await onLocalRanks(1, async (group, backend) => {
      const config = { inFeatures: 8, width: 8, hidden: 12, depth: 2, outFeatures: 8, tied: true };
      const net = new Net(config, backend);
      const { embed, head } = net;
      // embed and head hold 72 elements each, enough for a unit, but share their weight.
      const model = autoWrap(net, sizeBasedAutoWrapPolicy(50), { group });
      const wrapped = model.units().map((u) => u.module);
      expect(wrapped).not.toContain(embed);
      expect(wrapped).not.toContain(head);
      expect(wrapped).toHaveLength(1 + 2 * config.depth);
    });
  });

  it('trains like single-process training with one unit per block at world 2', async () => {
    const reference = await trainSingle({ steps: 2, batch: 8 });
    const results = await onLocalRanks(2, async (group, backend) => {
      const { AdamW } = await import('@webshard/tensor-core');
      const { makeBatches, slice } = await import('./test-support/models.js');
      const model = autoWrap(new Net(SMALL, backend), moduleClassAutoWrapPolicy([Block]), {
        group,
      });
      const optimizer = new AdamW(model.parameters(), { lr: 0.01, weightDecay: 0.01 });
      const losses: number[] = [];
      for (const batch of makeBatches(backend, SMALL, 2, 8)) {
        const [x, y] = slice(backend, batch, group.rank * 4, group.rank * 4 + 4);
        const loss = await model.call(x, y);
        losses.push(await loss.item());
        await loss.backward();
        optimizer.step();
        optimizer.zeroGrad();
      }
      return { losses, params: new Map() };
    });
    const losses = meanLosses(results);
    losses.forEach((l, i) => {
      expect(l).toBeCloseTo(reference.losses[i]!, 5);
    });
  });
});

describe('enableWrap and wrap', () => {
  it('wrap is the identity outside enableWrap and makes a unit inside, with overrides', async () => {
    await onLocalRanks(1, async (group, backend) => {
      const layer = new Linear(3, 2, { backend });
      expect(wrap(layer)).toBe(layer);
      const unit = enableWrap({ group, reshardAfterForward: false }, () =>
        wrap(new Linear(3, 2, { backend }), { flattenParameters: false }),
      );
      expect(unit).toBeInstanceOf(FullyShardedDataParallel);
      const { options } = unit as FullyShardedDataParallel;
      expect([options.reshardAfterForward, options.flattenParameters]).toEqual([false, false]);
      expect(() => enableWrap({ group }, async () => 1)).toThrow(FsdpConfigError);
    });
  });
});
