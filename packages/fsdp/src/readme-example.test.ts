// The quick start of README.md, kept runnable: if this test changes, change the README with it.
import { createLocalGroups } from '@webshard/collectives';
import {
  AdamW,
  type Backend,
  createCpuBackend,
  RandomGenerator,
  Linear,
  Module,
  mseLoss,
  relu,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { FullyShardedDataParallel } from './index.js';

describe('README quick start', () => {
  it('trains a model sharded over two ranks and the loss falls', async () => {
    class Mlp extends Module<[Tensor], Tensor> {
      readonly fc1: Linear;
      readonly fc2: Linear;
      constructor(backend: Backend, generator = new RandomGenerator(0)) {
        super();
        this.fc1 = this.registerModule('fc1', new Linear(4, 32, { backend, generator }));
        this.fc2 = this.registerModule('fc2', new Linear(32, 1, { backend, generator }));
      }
      forward(x: Tensor): Tensor {
        return this.fc2.call(relu(this.fc1.call(x)));
      }
    }

    // Two ranks in this thread; with `webshard-run` each rank is a process and calls
    // `await initProcessGroup()` for its group instead.
    const groups = createLocalGroups(2);
    const losses = await Promise.all(
      groups.map(async (group) => {
        const backend = createCpuBackend();
        const model = new FullyShardedDataParallel(new Mlp(backend), { group });
        const optimizer = new AdamW(model.parameters(), { lr: 1e-2 }); // this rank's shards
        const x = tensor([[group.rank, 1, 2, 3]], { backend });
        const y = tensor([[1]], { backend });
        const history: number[] = [];
        for (let step = 0; step < 20; step++) {
          const loss = mseLoss(await model.call(x), y);
          history.push(await loss.item());
          await loss.backward(); // gradients reduce-scattered into the shards
          optimizer.step();
          optimizer.zeroGrad();
        }
        return history;
      }),
    );
    for (const history of losses) expect(history.at(-1)!).toBeLessThan(history[0]! / 10);
    await Promise.all(groups.map((g) => g.close()));
  });
});
