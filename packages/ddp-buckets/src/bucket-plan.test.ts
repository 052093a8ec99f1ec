import { describe, expect, it } from 'vitest';
import { isPermutation, type PlanParam, planBuckets, planPerDType } from './bucket-plan.js';

const p = (
  name: string,
  size: number,
  dtype: 'f32' | 'f16' = 'f32',
  trigger = false,
): PlanParam => ({
  name,
  dtype,
  size,
  trigger,
});

describe('planBuckets', () => {
  it('closes a bucket once it holds messageSize elements, in ready order', () => {
    const params = [p('a', 3), p('b', 5), p('c', 2), p('d', 4)];
    expect(planBuckets(params, [3, 2, 1, 0], 5).map((b) => b.params)).toEqual([[3, 2], [1], [0]]);
    expect(planBuckets(params, [3, 2, 1, 0], 5).map((b) => b.size)).toEqual([6, 5, 3]);
  });

  it('keeps one dtype per bucket', () => {
    const params = [p('a', 3), p('h', 3, 'f16'), p('b', 3), p('g', 3, 'f16')];
    const plan = planBuckets(params, [0, 1, 2, 3], 6);
    expect(plan.map((b) => [b.dtype, b.params])).toEqual([
      ['f32', [0, 2]],
      ['f16', [1, 3]],
    ]);
  });

  it('cuts at trigger parameters instead of by size', () => {
    const params = [p('a', 100), p('b', 1, 'f32', true), p('c', 100), p('d', 1)];
    expect(planBuckets(params, [0, 1, 2, 3], 1).map((b) => b.params)).toEqual([
      [0, 1],
      [2, 3],
    ]);
  });

  it('puts everything of a dtype in one bucket for the delayed reduction', () => {
    const params = [p('a', 3), p('h', 3, 'f16'), p('b', 3)];
    expect(planPerDType(params, [0, 1, 2]).map((b) => b.params)).toEqual([[0, 2], [1]]);
  });

  it('checks a broadcast order', () => {
    expect(isPermutation([2, 0, 1], 3)).toBe(true);
    expect(isPermutation([0, 0, 1], 3)).toBe(false);
    expect(isPermutation([0, 1], 3)).toBe(false);
  });
});
