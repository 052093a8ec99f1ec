import { createLocalGroups } from '@webshard/collectives';
import { describe, expect, it } from 'vitest';
import { dilocoWorld } from './test-support/diloco-world.js';
import { flat, nudge } from './test-support/mlp-case.js';
import { type OpTimes, recordSubGroupOps } from './test-support/sub-group-ops.js';
import { closeWorld, createShapedWorld, newSeed } from './test-support/worlds.js';

// [Note: streamed fragments], `syncAll` (the end of training, an elastic world's sync points):
// every fragment's average is issued at once, each on its fragment's group, so the sync waits
// about one average's latency rather than F of them in turn; a failure leaves every fragment not
// yet landed as if never issued.

/** DiLoCo over 4 fragments (one a tensor of the test MLP), int8 with error feedback. */
const STREAM = {
  innerSteps: 8,
  fragments: 4,
  overlap: 2,
  compression: 'int8',
  blockSize: 8,
} as const;

describe('a streamed DiLoCo syncing every fragment', () => {
  it('issues every fragment average before the first completes (tcp, broadband-20: 40 ms one way)', async () => {
    const groups = await createShapedWorld(2, 'broadband-20');
    const ops: OpTimes[] = [];
    for (const group of groups) recordSubGroupOps(group, ops);
    const { dilocos } = await dilocoWorld(groups, 3, STREAM);
    await Promise.all(dilocos.map((d) => d.afterInnerStep()));
    expect(ops).toEqual([]);
    await Promise.all(dilocos.map((d) => d.outerSync()));
    // One group a fragment on each rank, each with its average's calls.
    expect(new Set(ops.map((op) => op.group))).toEqual(new Set([0, 1, 2, 3]));
    const firstDone = Math.min(...ops.map((op) => op.completed ?? Number.POSITIVE_INFINITY));
    for (let group = 0; group < 4; group++) {
      const first = ops.find((op) => op.group === group)!;
      // In turn, fragment g's first call would follow fragment g - 1's completed average.
      expect({ group, before: first.issued < firstDone }).toEqual({ group, before: true });
    }
    expect(dilocos[0]!.globalParameters()).toEqual(dilocos[1]!.globalParameters());
    await closeWorld(groups);
  }, 60_000);

  it('a fragment whose average fails leaves the fragments not yet landed as if never issued (their residuals too)', async () => {
    const seed = newSeed('streamed syncAll failure');
    const groups = createLocalGroups(2);
    // Fragment 0's group loses every call; fragment 1's and later averages complete.
    for (const group of groups) recordSubGroupOps(group, [], (_, g) => g === 0);
    const { models, dilocos } = await dilocoWorld(groups, seed, STREAM);
    for (const [r, model] of models.entries()) await nudge(model, seed, r, 0);
    await Promise.all(dilocos.map((d) => d.afterInnerStep()));
    const before = dilocos.map((d) => d.stateDict());
    const trained = await Promise.all(models.map(flat));
    const failed = await Promise.allSettled(dilocos.map((d) => d.outerSync()));
    expect(failed.map((f) => f.status)).toEqual(['rejected', 'rejected']);
    expect(failed.map((f) => (f as PromiseRejectedResult).reason.message)).toEqual([
      'lost',
      'lost',
    ]);
    for (const [r, d] of dilocos.entries()) {
      expect(d.state).toBe('failed');
      expect(await flat(models[r]!)).toEqual(trained[r]);
      // The other fragments' averages completed but were not applied: their error feedback
      // still owes what they encoded.
      expect(d.stateDict()).toEqual(before[r]);
    }
    await closeWorld(groups);
  });

  it.each([
    { overlap: 2, what: 'in flight: overlap 2' },
    { overlap: 0, what: 'landed at once: overlap 0' },
  ])(
    'the last step sends the fragment it issued once, not twice ($what), and every rank ends on the global copy',
    async ({ overlap }) => {
      const seed = newSeed('streamed last step');
      const groups = createLocalGroups(2);
      const ops: OpTimes[][] = [[], []];
      for (const [r, group] of groups.entries()) recordSubGroupOps(group, ops[r]!);
      const { models, dilocos } = await dilocoWorld(groups, seed, { ...STREAM, overlap });
      // Steps 1-8: fragments 1, 2 and 3 sync after steps 2, 4 and 6; fragment 0 after step 8, the
      // last, where every fragment syncs.
      for (let step = 1; step <= STREAM.innerSteps; step++) {
        for (const [r, model] of models.entries()) await nudge(model, seed, r, step);
        const last = step === STREAM.innerSteps;
        const results = await Promise.all(dilocos.map((d) => d.afterInnerStep({ last })));
        if (last) expect(results.map((x) => x.synced)).toEqual([true, true]);
      }
      // Per rank, the calls on each fragment's group (one int8 average is several).
      const counts = ops.map((list) =>
        [0, 1, 2, 3].map((g) => list.filter((op) => op.group === g).length),
      );
      // Fragments 1-3 synced twice (their turn, then the last step); fragment 0 once, at the last
      // step (afterInnerStep, then outerSync, would have sent it twice).
      const one = counts[0]![1]! / 2;
      expect(one).toBeGreaterThan(0);
      expect(counts).toEqual([
        [one, 2 * one, 2 * one, 2 * one],
        [one, 2 * one, 2 * one, 2 * one],
      ]);
      const global = dilocos.map((d) => d.globalParameters());
      expect(global[1]).toEqual(global[0]);
      for (const model of models) expect(await flat(model)).toEqual(global[0]);
      await closeWorld(groups);
    },
  );
});
