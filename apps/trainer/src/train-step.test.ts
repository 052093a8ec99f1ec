import { AdamW, createCpuBackend, mul, sum, tensor } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { accumulatedStep } from './train-step.js';

describe('accumulatedStep', () => {
  it('leaves no gradient behind when the step fails part way, so the step run again is clean', async () => {
    // An elastic member's step whose collectives failed runs again in the new world
    // ([Note: elastic training in the trainer]): the first attempt's gradient must not add up.
    const backend = createCpuBackend();
    const param = () => {
      const p = tensor([1, 2, 3], { backend });
      p.requiresGrad = true;
      return p;
    };
    const w = param();
    const optimizer = new AdamW([w], { lr: 0.1 });
    const loss = () => sum(mul(w, w));
    const lost = new Error('rank 2 is gone');
    await expect(
      accumulatedStep([w], optimizer, [loss], {
        clip: Number.POSITIVE_INFINITY,
        meanOverRanks: async () => {
          throw lost;
        },
      }),
    ).rejects.toBe(lost);
    expect(w.grad).toBeNull();
    expect([...(await w.read())]).toEqual([1, 2, 3]);
    // Run again: the same update as a step that never failed.
    const fresh = param();
    const clean = new AdamW([fresh], { lr: 0.1 });
    await accumulatedStep([fresh], clean, [() => sum(mul(fresh, fresh))], {
      clip: Number.POSITIVE_INFINITY,
    });
    await accumulatedStep([w], optimizer, [loss], { clip: Number.POSITIVE_INFINITY });
    expect([...(await w.read())]).toEqual([...(await fresh.read())]);
  });
});
