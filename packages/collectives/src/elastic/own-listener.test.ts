import { describe, expect, it } from 'vitest';
import { ElasticCoordinator } from './coordinator.js';
import { joinElastic } from './elastic-group.js';
import { ElasticError } from './errors.js';

// A member whose own data listener cannot open (an address that is not this machine's: the
// documentation range 203.0.113.0/24) fails its join with E_LISTEN instead of asking the world to
// rebuild forever, and the member already there goes on alone.
describe('an elastic member that cannot listen', () => {
  it.each(['tcp', 'ws'] as const)(
    'over %s: fails its join naming the listener, and the world goes on without it',
    async (backend) => {
      const coordinator = await ElasticCoordinator.start({ minWorldSize: 1, maxWorldSize: 2 });
      try {
        const options = { url: coordinator.url, backend, timeoutMs: 3000 };
        const first = await joinElastic(options);
        const late = joinElastic({ ...options, host: '203.0.113.7' }).catch((e: unknown) => e);
        // The first member reaches sync points until the newcomer is gone again.
        let change = await first.sync();
        while (change === null || change.worldSize !== 1) change = await first.sync();
        const error = await late;
        expect(error).toBeInstanceOf(ElasticError);
        const typed = error as ElasticError;
        expect([typed.op, typed.code]).toEqual(['join', 'E_LISTEN']);
        expect(typed.message).toMatch(
          /^\[elastic\.join\] member 1: this member cannot open its data listener \(listen EADDRNOTAVAIL.*203\.0\.113\.7/,
        );
        expect(first.membership.worldSize).toBe(1);
        await first.close();
      } finally {
        await coordinator.close();
      }
    },
    60_000,
  );
});
