import { createCpuBackend, Linear, ReLU, Sequential } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { balancedCut, layerDeviceBytes, planSlices } from './slice-plan.js';

describe('slice plan', () => {
  it('cuts consecutive layers so the largest slice holds as few parameters as possible', () => {
    // Greedy filling to total/k (fairscale) gives [10, 10] [10, 1, 1, 1, 1] [] for k = 3.
    expect(balancedCut([10, 10, 10, 1, 1, 1, 1], 3)).toEqual([0, 1, 2]);
    expect(balancedCut([1, 1, 1, 1, 4], 2)).toEqual([0, 4]);
    expect(balancedCut([5, 0, 5, 0], 4)).toEqual([0, 1, 2, 3]);
  });

  it('names each slice layers after their place in the Sequential and lists their parameters', () => {
    const backend = createCpuBackend();
    const model = new Sequential(
      new Linear(4, 4, { backend }),
      new ReLU(),
      new Linear(4, 4, { backend }),
      new ReLU(),
      new Linear(4, 2, { backend }),
    );
    const plan = planSlices(model, 3);
    expect(plan.slices.map((s) => s.layerNames)).toEqual([['0', '1'], ['2', '3'], ['4']]);
    expect(plan.slices.map((s) => s.paramCount)).toEqual([20, 20, 10]);
    expect(plan.slices.flatMap((s) => s.params)).toEqual(model.parameters());
    // 4x4 weight and 4 bias, each in a 256-byte size class, with gradients.
    expect(layerDeviceBytes(model.at(0))).toBe(4 * 256);
  });

  it('takes a list of modules as the slices', () => {
    const backend = createCpuBackend();
    const plan = planSlices([new Linear(2, 2, { backend }), new Linear(2, 2, { backend })], 3);
    expect(plan.slices.length).toBe(2);
  });

  it('keeps a tensor of two slices out of both, in shared', () => {
    const backend = createCpuBackend();
    const a = new Linear(3, 3, { backend });
    const b = new Linear(3, 3, { backend });
    b.weight = a.weight;
    const plan = planSlices(new Sequential(a, b), 2);
    expect(plan.shared.params).toEqual([a.weight]);
    expect(plan.slices.map((s) => s.params)).toEqual([[a.bias], [b.bias]]);
    expect(planSlices(new Sequential(a, b), 1).shared.params).toEqual([]);
  });
});
