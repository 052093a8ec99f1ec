import { describe, expect, it } from 'vitest';
import { interleavedGradients } from './test-support/interleaving.js';
import { createLocalGroups } from './transports/local/local-transport.js';
import { launchThreads } from './transports/shm/launch-threads.js';
import { tsxBootstrap } from './test-support/shm/shm-suite-run.js';

const WORLD = 4;

async function alone(): Promise<Awaited<ReturnType<typeof interleavedGradients>>[]> {
  const out = [];
  for (let rank = 0; rank < WORLD; rank++) out.push(await interleavedGradients(rank, null));
  return out;
}

function expectSameGradients(
  got: { grads: Record<string, number[]>; log: string[] }[],
  expected: { grads: Record<string, number[]> }[],
) {
  got.forEach((r, rank) => {
    expect(r.grads, `rank ${rank}`).toEqual(expected[rank]!.grads);
    // One callback per backward, right before that backward resolved.
    expect(r.log).toEqual(['callback', 'backward done', 'callback', 'backward done']);
  });
}

describe('autograd with several ranks and async hooks that await collectives (#13 proof)', () => {
  it('4 ranks in one thread (local): every rank’s gradients equal its own single-process ones bit for bit', async () => {
    const expected = await alone();
    const groups = createLocalGroups(WORLD);
    try {
      const got = await Promise.all(groups.map((g) => interleavedGradients(g.rank, g)));
      expectSameGradients(got, expected);
    } finally {
      await Promise.all(groups.map((g) => g.close()));
    }
  });

  it('4 ranks in worker threads (shm): the same', async () => {
    const expected = await alone();
    const outcomes = await launchThreads(WORLD, tsxBootstrap('../interleaving-rank.ts'), null, {
      eval: true,
      execArgv: ['--conditions=@webshard/source'],
    });
    const got = outcomes.map((o) => {
      if (o.status !== 'fulfilled') throw new Error(JSON.stringify(o));
      return o.value as { grads: Record<string, number[]>; log: string[] };
    });
    expectSameGradients(got, expected);
  });
});
