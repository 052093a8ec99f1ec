import { AdamW, clipGradNorm, createCpuBackend, type Tensor } from '@webshard/tensor-core';
import { describe, expect, it, vi } from 'vitest';
import { clipShardedGradNorm, ShardedGradScaler } from './grad-norm.js';
import { makeBatches, Net, SMALL, slice } from './test-support/models.js';
import { wrapNet } from './test-support/parity.js';
import { onLocalRanks } from './test-support/ranks.js';

const BATCH = 8;

async function referenceNorms(normType: number, maxNorm: number): Promise<number[]> {
  const backend = createCpuBackend();
  const net = new Net(SMALL, backend);
  const optimizer = new AdamW(net.parameters(), { lr: 0.01 });
  const norms: number[] = [];
  for (const batch of makeBatches(backend, SMALL, 3, BATCH)) {
    const [x, y] = slice(backend, batch, 0, BATCH);
    const loss = await net.call(x, y);
    await loss.backward();
    norms.push(await clipGradNorm(net.parameters(), maxNorm, { normType }));
    optimizer.step();
    optimizer.zeroGrad();
  }
  return norms;
}

describe('clipShardedGradNorm', () => {
  for (const normType of [2, 1, Number.POSITIVE_INFINITY]) {
    it(`norm ${normType}: the global norm and the clipped step of single-process training`, async () => {
      const maxNorm = 0.05;
      const expected = await referenceNorms(normType, maxNorm);
      const results = await onLocalRanks(4, async (group, backend) => {
        const model = wrapNet(new Net(SMALL, backend), group, {}, true);
        const optimizer = new AdamW(model.parameters(), { lr: 0.01 });
        const norms: number[] = [];
        const per = BATCH / group.size;
        for (const batch of makeBatches(backend, SMALL, 3, BATCH)) {
          const [x, y] = slice(backend, batch, group.rank * per, (group.rank + 1) * per);
          const loss = (await model.call(x, y)) as Tensor;
          await loss.backward();
          // Each shard's gradient is scaled in place (tensor-core's clipGradNorm, `g.mul_(coef)`).
          const copy = vi.spyOn(backend, 'copy');
          try {
            norms.push(await clipShardedGradNorm(model, maxNorm, normType));
            expect(copy).not.toHaveBeenCalled();
          } finally {
            copy.mockRestore();
          }
          optimizer.step();
          optimizer.zeroGrad();
        }
        return norms;
      });
      for (const norms of results) {
        norms.forEach((n, i) => {
          expect(n).toBeCloseTo(expected[i]!, 5);
        });
      }
      expect(expected[0]!).toBeGreaterThan(maxNorm);
    });
  }
});

describe('ShardedGradScaler', () => {
  it('every rank skips the step when only one rank sees an inf', async () => {
    const results = await onLocalRanks(2, async (group, backend) => {
      const model = wrapNet(new Net(SMALL, backend), group, {}, true);
      const optimizer = new AdamW(model.parameters(), { lr: 0.01 });
      const scaler = new ShardedGradScaler(group, { initScale: 1024 });
      const [batch] = makeBatches(backend, SMALL, 1, BATCH);
      const [x, y] = slice(backend, batch!, group.rank * 4, group.rank * 4 + 4);
      const loss = (await model.call(x, y)) as Tensor;
      await scaler.scale(loss).backward();
      if (group.rank === 1) {
        const grad = model.parameters()[0]!.grad!;
        const values = (await grad.read()) as Float32Array;
        values[0] = Number.POSITIVE_INFINITY;
        grad.write(values);
      }
      const before = (await model.parameters()[0]!.read()) as Float32Array;
      const stepped = await scaler.step(optimizer);
      scaler.update();
      const after = (await model.parameters()[0]!.read()) as Float32Array;
      return { stepped, same: before.every((v, i) => v === after[i]), scale: scaler.getScale() };
    });
    for (const r of results) expect(r).toEqual({ stepped: false, same: true, scale: 512 });
  });
});
