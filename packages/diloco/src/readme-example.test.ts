// The example of README.md, kept runnable: if this test changes, change the README with it.
import { createLocalGroups } from '@webshard/collectives';
import {
  AdamW,
  createCpuBackend,
  Linear,
  mseLoss,
  ReLU,
  Sequential,
  tensor,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { DiLoCo } from './index.js';

describe('README example', () => {
  it('trains three replicas that are equal after each outer sync', async () => {
    const backend = createCpuBackend();
    const groups = createLocalGroups(3);
    const lines: string[] = [];
    const models = await Promise.all(
      groups.map(async (group) => {
        const model = new Sequential(
          new Linear(4, 8, { backend }),
          new ReLU(),
          new Linear(8, 1, { backend }),
        );
        const inner = new AdamW(model.parameters(), { lr: 1e-2 });
        const diloco = await DiLoCo.create(model.parameters(), inner, {
          group,
          innerSteps: 5,
          compression: 'int8',
        });
        for (let step = 0; step < 10; step++) {
          const x = tensor([group.rank, step, 2, 3], { backend, shape: [1, 4] });
          const y = tensor([1], { backend, shape: [1, 1] });
          const loss = mseLoss(model.call(x), y);
          await loss.backward();
          const { synced } = await diloco.step();
          model.zeroGrad({ setToNone: true });
          if (synced && group.rank === 0) {
            lines.push(
              `outer step ${(step + 1) / 5}: loss ${(await loss.item()).toFixed(4)}, ${diloco.bytesSent} bytes sent`,
            );
          }
        }
        return model;
      }),
    );
    expect(lines.map((l) => l.slice(0, 12))).toEqual(['outer step 1', 'outer step 2']);
    const [a, b, c] = await Promise.all(
      models.map((m) => Promise.all(m.parameters().map(async (p) => [...(await p.read())]))),
    );
    expect(b).toEqual(a);
    expect(c).toEqual(a);
  });
});
