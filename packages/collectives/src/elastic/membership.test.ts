import { ArgumentError } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { checkWorldBounds, nextMembers } from './membership.js';
import { elasticShare } from './partition.js';

describe('nextMembers ([Note: elastic rank order])', () => {
  const bounds = { minWorldSize: 1, maxWorldSize: 4 };
  it('keeps survivors in order and appends newcomers by id, up to the maximum', () => {
    expect(nextMembers([4, 0, 7], new Set([4, 7]), [9, 8, 12], bounds)).toEqual({
      members: [4, 7, 8, 9],
      left: [0],
      joined: [8, 9],
    });
    expect(nextMembers([1, 2], new Set([1, 2]), [], bounds)).toEqual({
      members: [1, 2],
      left: [],
      joined: [],
    });
  });
  it('refuses bounds that cannot hold a world', () => {
    expect(() => checkWorldBounds({ minWorldSize: 0, maxWorldSize: 2 })).toThrow(ArgumentError);
    expect(() => checkWorldBounds({ minWorldSize: 3, maxWorldSize: 2 })).toThrow(
      'maxWorldSize must be an integer >= minWorldSize (3), got 2',
    );
  });
});

describe('elasticShare', () => {
  it('covers every item once at every world size, sizes within one', () => {
    for (const total of [0, 1, 7, 12, 100]) {
      for (let size = 1; size <= 5; size++) {
        const shares = Array.from({ length: size }, (_, rank) => elasticShare(total, size, rank));
        let next = 0;
        for (const share of shares) {
          expect(share.start).toBe(next);
          next += share.count;
        }
        expect(next).toBe(total);
        const counts = shares.map((s) => s.count);
        expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1);
        expect(shares.reduce((sum, s) => sum + s.weight, 0)).toBeCloseTo(total === 0 ? 0 : 1, 12);
      }
    }
    expect(elasticShare(12, 3, 1)).toEqual({ start: 4, count: 4, weight: 1 / 3 });
    expect(() => elasticShare(12, 2, 2)).toThrow('[elasticShare] rank 2 is outside [0, 2)');
  });
});
