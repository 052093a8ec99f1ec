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
import { DistributedDataParallel } from './index.js';

// Two `local` ranks run backward concurrently in one thread: this needs tensor-core's engine to
// keep each backward's queued callbacks apart (the engine fix in review beside this package).
describe('README example (local, several ranks: needs the engine fix)', () => {
  it('trains two replicas that stay equal', async () => {
    const backend = createCpuBackend();
    const groups = createLocalGroups(2);
    const models = await Promise.all(
      groups.map(async (group) => {
        const model = new Sequential(
          new Linear(4, 8, { backend }),
          new ReLU(),
          new Linear(8, 1, { backend }),
        );
        const ddp = new DistributedDataParallel(model, { group, messageSize: 16 });
        const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
        for (let step = 0; step < 3; step++) {
          const x = tensor([group.rank, 1, 2, 3], { backend, shape: [1, 4] });
          const y = tensor([1], { backend, shape: [1, 1] });
          const loss = mseLoss(await ddp.call(x), y);
          await loss.backward();
          optimizer.step();
          model.zeroGrad({ setToNone: true });
        }
        return model;
      }),
    );
    const [a, b] = await Promise.all(
      models.map((m) => Promise.all(m.parameters().map(async (p) => [...(await p.read())]))),
    );
    expect(b).toEqual(a);
  });
});
