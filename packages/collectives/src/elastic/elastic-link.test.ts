import { describe, expect, it } from 'vitest';
import { ArgumentError } from '@webshard/tensor-core';
import { ElasticCoordinator } from './coordinator.js';
import { joinElastic } from './elastic-group.js';
import { ElasticError } from './errors.js';

// [Note: the link shaper] in an elastic world: every epoch's transport is shaped as `link` says,
// and the members' links are checked against rank 0's (a shaped member and an unshaped one cannot
// talk: the shaper stamps every message).
describe("an elastic world's simulated link", () => {
  it('members that give the same link train together; one that gives another is refused naming both', async () => {
    const coordinator = await ElasticCoordinator.start({ minWorldSize: 2, maxWorldSize: 2 });
    try {
      const options = { url: coordinator.url, backend: 'ws' as const, timeoutMs: 20_000 };
      const members = await Promise.all([
        joinElastic({ ...options, link: 'latency=20ms,bandwidth=20mbit' }),
        joinElastic({ ...options, link: 'latency=20ms,bandwidth=20mbit' }),
      ]);
      const sums = members.map((_, r) => Float32Array.of(r, 1, 2, 3));
      await Promise.all(members.map((m, r) => m.group.allReduce(sums[r]!).wait()));
      expect([...sums[0]!]).toEqual([1, 2, 4, 6]);
      await Promise.all(members.map((m) => m.close()));
    } finally {
      await coordinator.close();
    }
    const mixed = await ElasticCoordinator.start({ minWorldSize: 2, maxWorldSize: 2 });
    try {
      const options = { url: mixed.url, backend: 'ws' as const, timeoutMs: 20_000 };
      const results = await Promise.allSettled([
        joinElastic({ ...options, link: 'broadband-20' }),
        joinElastic({ ...options, link: 'broadband-100' }),
      ]);
      const refused = results.filter((r) => r.status === 'rejected');
      expect(refused.length).toBeGreaterThanOrEqual(1);
      const error = (refused[0] as PromiseRejectedResult).reason as Error;
      expect(ElasticError.isInstance(error)).toBe(true);
      expect((error as ElasticError).code).toBe('E_LINK');
      expect(ArgumentError.isInstance(error.cause)).toBe(true);
      expect(error.message).toMatch(/simulates the link .* but rank 0 simulates/);
      for (const r of results) if (r.status === 'fulfilled') await r.value.close();
    } finally {
      await mixed.close();
    }
  }, 90_000);
});
