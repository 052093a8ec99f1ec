import { AdamW, createCpuBackend, mul, sum, tensor } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { capturedTrainStep } from './captured-train-step.js';
import { trainStep } from './train-step.js';

describe('capturedTrainStep', () => {
  it('refuses a loss before any update and leaves no gradient, then steps as the eager step', async () => {
    const backend = createCpuBackend();
    const param = () => {
      const p = tensor([1, 2, 3], { backend });
      p.requiresGrad = true;
      return p;
    };
    const w = param();
    const optimizer = new AdamW([w], { lr: 0.1 });
    let refuse = false;
    const step = capturedTrainStep([w], optimizer, ([x]) => sum(mul(mul(w, w), x!)), {
      clip: Number.POSITIVE_INFINITY,
      check: () => {
        if (refuse) throw new Error('not finite');
      },
    });
    const ones = () => tensor([1, 1, 1], { backend });
    await step.step([ones()]);
    // The capture's step is refused after its backward: no update, no gradient left behind.
    refuse = true;
    const before = [...(await w.read())];
    await expect(step.step([ones()])).rejects.toThrow('not finite');
    expect(w.grad).toBeNull();
    expect([...(await w.read())]).toEqual(before);
    refuse = false;
    // The same two updates as eager steps that were never refused.
    const fresh = param();
    const clean = new AdamW([fresh], { lr: 0.1 });
    for (let i = 0; i < 3; i++) {
      await trainStep([fresh], clean, () => sum(mul(fresh, fresh)), {
        clip: Number.POSITIVE_INFINITY,
      });
    }
    await step.step([ones()]);
    await step.step([ones()]);
    expect(step.captured.stats.replays).toBe(1);
    expect([...(await w.read())]).toEqual([...(await fresh.read())]);
  });
});
