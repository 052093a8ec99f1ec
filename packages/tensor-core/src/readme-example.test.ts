// The quick start of README.md, kept runnable: if this test changes, change the README with it.
import { describe, expect, it } from 'vitest';
import {
  AdamW,
  clipGradNorm,
  createBackend,
  crossEntropy,
  GELU,
  RandomGenerator,
  Linear,
  Sequential,
  tensor,
} from './index.js';

describe('README quick start', () => {
  it('trains a two-layer MLP and the loss falls', async () => {
    const backend = await createBackend({ kind: 'cpu' }); // 'auto' picks WebGPU where an adapter exists
    const generator = new RandomGenerator(0);
    const model = new Sequential(
      new Linear(4, 16, { backend, generator }),
      new GELU(),
      new Linear(16, 3, { backend, generator }),
    );
    const optimizer = new AdamW(model.parameters(), { lr: 3e-2 });

    const x = tensor(
      [
        [0.1, 0.2, 0.3, 0.4],
        [1, 0, -1, 0],
        [0.5, -0.5, 0.5, -0.5],
      ],
      { backend },
    );
    const y = tensor([0, 1, 2], { backend, dtype: 'i32' });

    const losses: number[] = [];
    for (let step = 0; step < 20; step++) {
      const loss = crossEntropy(model.call(x), y);
      await loss.backward();
      await clipGradNorm(model.parameters(), 1.0);
      optimizer.step();
      optimizer.zeroGrad();
      losses.push(await loss.item());
      loss.free();
    }
    expect(model.namedParameters().map(([name]) => name)).toEqual([
      '0.weight',
      '0.bias',
      '2.weight',
      '2.bias',
    ]);
    expect(losses[19]!).toBeLessThan(losses[0]! * 0.2);
  });
});
