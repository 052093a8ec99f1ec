import { describe, expect, it } from 'vitest';
import { meanLosses, trainSingle } from './test-support/parity.js';
import { trainShm } from './test-support/shm.js';

const RUN = { steps: 3, batch: 8, nested: true };

function maxRelative(actual: ArrayLike<number>, expected: ArrayLike<number>): number {
  let worst = 0;
  for (let i = 0; i < expected.length; i++) {
    worst = Math.max(
      worst,
      Math.abs(actual[i]! - expected[i]!) / Math.max(1, Math.abs(expected[i]!)),
    );
  }
  return worst;
}

describe('FSDP parity over shm (worker threads)', () => {
  for (const world of [2, 4]) {
    it(`world ${world}: losses and parameters equal single-process training`, async () => {
      const reference = await trainSingle(RUN);
      const results = await trainShm(world, RUN);
      expect(maxRelative(meanLosses(results), reference.losses)).toBeLessThan(1e-5);
      for (const result of results) {
        // [Note: flat buffers in registered memory]: every collective of every step ran in place.
        expect(result.stagedOps).toEqual([0, 0, 0]);
        for (const [name, values] of reference.params) {
          expect(maxRelative(result.params.get(name)!, values), name).toBeLessThan(1e-5);
        }
      }
    });
  }

  it('world 2 with mixed precision (f16) and reshardAfterForward: false', async () => {
    const reference = await trainSingle({ ...RUN, computeDtype: 'f16' });
    const results = await trainShm(2, RUN, {
      mixedPrecision: true,
      computeDtype: 'f16',
      reshardAfterForward: false,
    });
    // The same allowance as the local mixed-precision tests ([Note: mixed-precision parity across ranks]).
    expect(maxRelative(meanLosses(results), reference.losses)).toBeLessThan(2 ** -10);
  });
});

describe('a rank that dies mid-backward', () => {
  it('makes the other rank fail fast with an error naming it', async () => {
    const { launchThreads } = await import('@webshard/collectives/node');
    const { tsxBootstrap } = await import('./test-support/shm.js');
    const started = Date.now();
    const outcomes = await launchThreads<null, string>(2, tsxBootstrap('./shm-die.ts'), null, {
      eval: true,
      execArgv: ['--conditions=@webshard/source'],
      group: { timeoutMs: 30_000 },
    });
    expect(outcomes[1]).toMatchObject({ rank: 1, status: 'exited' });
    expect(outcomes[0]!.status).toBe('rejected');
    const error = (outcomes[0] as { error: { name: string; message: string } }).error;
    expect(error.name).toBe('PeerLostError');
    expect(error.message).toMatch(/rank 1/);
    // Well within the 30 s deadline: the parent publishes the death at once.
    expect(Date.now() - started).toBeLessThan(20_000);
  });
});
