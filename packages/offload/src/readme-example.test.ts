// The example of README.md, kept runnable: if this test changes, change the README with it.
import {
  AdamW,
  createCpuBackend,
  RandomGenerator,
  Linear,
  mseLoss,
  OutOfMemoryError,
  ReLU,
  Sequential,
  tensor,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { OffloadModel } from './index.js';

describe('README example', () => {
  it('trains a model almost three times the device limit, and the loss falls', async () => {
    const host = createCpuBackend();
    const device = createCpuBackend({ memoryLimit: 384 * 1024 }); // or: await createWebGpuBackend()
    const generator = new RandomGenerator(0);
    const layers = [];
    for (let i = 0; i < 16; i++) {
      layers.push(new Linear(128, 128, { backend: host, generator }), new ReLU());
    }
    const model = new Sequential(...layers, new Linear(128, 1, { backend: host, generator }));

    const offloaded = new OffloadModel(model, {
      device,
      offloadDevice: host,
      numSlices: 16,
      checkpointActivation: true,
      numMicrobatches: 2,
    });
    const optimizer = new AdamW(offloaded.parameters(), { lr: 1e-2 });

    const x = tensor(
      Array.from({ length: 8 * 128 }, (_, i) => Math.sin(i)),
      { backend: device, shape: [8, 128] },
    );
    const y = tensor(new Array(8).fill(0.5), { backend: device, shape: [8, 1] });
    const losses: number[] = [];
    for (let step = 0; step < 10; step++) {
      const loss = mseLoss(await offloaded.forward(x), y);
      losses.push(await loss.item());
      await loss.backward();
      await offloaded.step(optimizer); // AdamW on the host, where the parameters live
      for (const p of offloaded.parameters()) {
        p.grad?.free();
        p.grad = null;
      }
      loss.free();
    }
    expect(device.memoryStats().peakAllocated).toBeLessThanOrEqual(384 * 1024);
    expect(losses[9]!).toBeLessThan(losses[0]! * 0.5);
    // The same model does not fit on the device at all.
    await expect(model.to(device)).rejects.toThrow(OutOfMemoryError);
  });
});
