import { describe, expect, it } from 'vitest';
import { ElasticCoordinator } from './coordinator.js';
import { joinElastic } from './elastic-group.js';
import { ElasticError, ElasticWorldTooSmallError } from './errors.js';

// [Note: elastic membership], below the minimum: the coordinator waits `belowMinTimeoutMs` for
// newcomers, then every member's call fails with the sizes.
describe('an elastic world below its minimum', () => {
  it('fails a lone member at the start after the wait, naming the sizes', async () => {
    const coordinator = await ElasticCoordinator.start({
      minWorldSize: 2,
      maxWorldSize: 4,
      belowMinTimeoutMs: 300,
    });
    try {
      const joined = joinElastic({ url: coordinator.url, timeoutMs: 10_000 });
      const error = await joined.catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ElasticWorldTooSmallError);
      const typed = error as ElasticWorldTooSmallError;
      expect([typed.worldSize, typed.minWorldSize, typed.op, typed.code]).toEqual([
        1,
        2,
        'join',
        'E_WORLD_TOO_SMALL',
      ]);
      expect(typed.waitedMs).toBeGreaterThanOrEqual(300);
      expect(typed.message).toMatch(
        /^\[elastic\.join\] member 0: the world has 1 member\(s\), below the minimum world size 2 \(--min-world-size\), and no member joined within \d+ ms$/,
      );
      await expect(coordinator.done).rejects.toBeInstanceOf(ElasticWorldTooSmallError);
    } finally {
      await coordinator.close();
    }
  });

  it.each(['tcp', 'ws'] as const)(
    'fails the survivor over %s when the world shrinks below it and nobody joins',
    async (backend) => {
      const coordinator = await ElasticCoordinator.start({
        minWorldSize: 2,
        maxWorldSize: 2,
        belowMinTimeoutMs: 300,
      });
      try {
        const options = { url: coordinator.url, backend, timeoutMs: 10_000 };
        const [a, b] = await Promise.all([joinElastic(options), joinElastic(options)]);
        expect([a!.membership.worldSize, b!.membership.worldSize]).toEqual([2, 2]);
        await b!.close();
        const error = await a!.sync().catch((e: unknown) => e);
        expect(error).toBeInstanceOf(ElasticWorldTooSmallError);
        expect((error as ElasticWorldTooSmallError).worldSize).toBe(1);
        expect((error as Error).message).toContain('below the minimum world size 2');
        // A newcomer after the failure is refused with the reason.
        const late = await joinElastic({ ...options, timeoutMs: 2000 }).catch((e: unknown) => e);
        expect(late).toBeInstanceOf(ElasticError);
        expect((late as ElasticError).message).toContain('below the minimum world size 2');
        await a!.close();
      } finally {
        await coordinator.close();
      }
    },
    20_000,
  );
});
