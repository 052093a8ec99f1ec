import { createLocalGroups, type ProcessGroup } from '@webshard/collectives';
import { describe, expect, it } from 'vitest';
import type { DiLoCo } from './diloco.js';
import { dilocoWorld } from './test-support/diloco-world.js';
import { flat, type Model, nudge } from './test-support/mlp-case.js';
import { closeWorld, newSeed } from './test-support/worlds.js';

// [Note: streamed fragments]: a member lost with a fragment in flight. The fragment is never
// applied half-averaged, a regroup drops it without waiting on the old group, and the survivors
// go on as a fresh world of 2 holding their state would. With int8 (merged by the paper's
// mixing) and topk (merged by carry, which holds each fragment's parameters from its issue:
// [Note: merging a landed fragment]).
const STREAM = { innerSteps: 4, fragments: 2, overlap: 2 } as const;
const CODECS = {
  int8: { compression: 'int8', blockSize: 8 },
  topk: { compression: 'topk', blockSize: 16, density: 1 / 4 },
} as const;
type Codec = keyof typeof CODECS;

function world(groups: ProcessGroup[], seed: number, codec: Codec, broadcast = true) {
  return dilocoWorld(groups, seed, { ...STREAM, ...CODECS[codec], broadcast });
}

/** Two wrappers in a fresh world of 2 holding `states` and `params`: what the survivors should be. */
async function freshPair(
  codec: Codec,
  seed: number,
  states: ReturnType<DiLoCo['stateDict']>[],
  params: Float32Array[],
) {
  const groups = createLocalGroups(2);
  const pair = await world(groups, seed, codec, false);
  for (const [r, d] of pair.dilocos.entries()) {
    d.loadStateDict(states[r]!);
    let offset = 0;
    for (const p of pair.models[r]!.parameters()) {
      p.write(params[r]!.subarray(offset, offset + p.size));
      offset += p.size;
    }
  }
  return { groups, ...pair };
}

async function stepAll(models: Model[], dilocos: DiLoCo[], seed: number, step: number) {
  for (const [r, m] of models.entries()) await nudge(m, seed, r, step);
  await Promise.all(dilocos.map((d) => d.afterInnerStep()));
}

describe('streamed fragments in an elastic world', () => {
  it.each(['int8', 'topk'] as const)(
    'a member lost while a fragment is in flight: landing it fails and changes nothing; regrouped, the survivors go on as a world of 2 (%s)',
    async (codec) => {
      const seed = newSeed(`streamed elastic abort ${codec}`);
      const three = createLocalGroups(3);
      const { models, dilocos } = await world(three, seed, codec);
      expect(dilocos[0]!.options.merge).toBe(codec === 'topk' ? 'carry' : 'mix');
      for (let step = 1; step <= 3; step++) await stepAll(models, dilocos, seed, step);
      // Rank 2 is lost before step 4: the survivors land fragment 1 and issue fragment 0 (to land
      // after step 6), whose average cannot finish; then their group aborts, as a lost peer aborts it.
      const survivors = dilocos.slice(0, 2);
      await stepAll(models.slice(0, 2), survivors, seed, 4);
      expect(survivors.map((d) => d.fragmentInFlight)).toEqual([0, 0]);
      const before = survivors.map((d) => d.stateDict());
      await stepAll(models.slice(0, 2), survivors, seed, 5);
      for (const g of three) g.abort('rank 2 is gone');
      for (const [r, m] of models.slice(0, 2).entries()) await nudge(m, seed, r, 6);
      const trained = await Promise.all(models.slice(0, 2).map(flat));
      const failed = await Promise.allSettled(survivors.map((d) => d.afterInnerStep()));
      expect(failed.map((f) => f.status)).toEqual(['rejected', 'rejected']);
      for (const [r, d] of survivors.entries()) {
        expect(d.state).toBe('failed');
        // Nothing of the fragment was applied: parameters as trained, global, momentum, residuals kept.
        expect(await flat(models[r]!)).toEqual(trained[r]);
        expect(d.stateDict()).toEqual({ ...before[r]!, innerStep: 6 });
      }
      const two = createLocalGroups(2);
      for (const [r, d] of survivors.entries()) d.regroup(two[r]!);
      expect(survivors.map((d) => d.state)).toEqual(['idle', 'idle']);
      expect(survivors.map((d) => d.fragmentInFlight)).toEqual([null, null]);
      const fresh = await freshPair(
        codec,
        seed,
        survivors.map((d) => d.stateDict()),
        trained,
      );
      for (let step = 7; step <= 13; step++) {
        await stepAll(models.slice(0, 2), survivors, seed, step);
        await stepAll(fresh.models, fresh.dilocos, seed, step);
      }
      for (let r = 0; r < 2; r++) {
        expect(await flat(models[r]!)).toEqual(await flat(fresh.models[r]!));
        expect(survivors[r]!.globalParameters()).toEqual(fresh.dilocos[r]!.globalParameters());
      }
      await closeWorld([...three, ...two, ...fresh.groups]);
    },
  );

  it.each(['int8', 'topk'] as const)(
    'regroup with a fragment still on the wire drops it at once (no wait on the old group); its pseudo-gradient goes out in the new world (%s)',
    async (codec) => {
      const seed = newSeed(`streamed elastic unsettled ${codec}`);
      const three = createLocalGroups(3);
      const { models, dilocos } = await world(three, seed, codec);
      for (let step = 1; step <= 3; step++) await stepAll(models, dilocos, seed, step);
      // Rank 2 is lost silently before step 4: the survivors land fragment 1 and issue fragment 0,
      // whose average can never finish on the old group.
      const survivors = dilocos.slice(0, 2);
      await stepAll(models.slice(0, 2), survivors, seed, 4);
      expect(survivors.map((d) => d.fragmentInFlight)).toEqual([0, 0]);
      const asIfDropped = survivors.map((d) => d.stateDict());
      await stepAll(models.slice(0, 2), survivors, seed, 5);
      const two = createLocalGroups(2);
      for (const [r, d] of survivors.entries()) d.regroup(two[r]!);
      expect(survivors.map((d) => d.fragmentInFlight)).toEqual([null, null]);
      for (const [r, d] of survivors.entries()) {
        expect(d.stateDict()).toEqual({ ...asIfDropped[r]!, innerStep: 5 });
      }
      const params = await Promise.all(models.slice(0, 2).map(flat));
      const fresh = await freshPair(
        codec,
        seed,
        survivors.map((d) => d.stateDict()),
        params,
      );
      // The sync the world runs after a change: every fragment, over the 2.
      await Promise.all(survivors.map((d) => d.outerSync()));
      await Promise.all(fresh.dilocos.map((d) => d.outerSync()));
      for (let r = 0; r < 2; r++) {
        expect(await flat(models[r]!)).toEqual(await flat(fresh.models[r]!));
        expect(survivors[r]!.globalParameters()).toEqual(fresh.dilocos[r]!.globalParameters());
      }
      // The global copy moved by the pseudo-gradient the dropped fragment held.
      expect(survivors[0]!.globalParameters()).not.toEqual(asIfDropped[0]!.global);
      // The old world is aborted, as an elastic world's is: the dropped average fails there, unseen.
      for (const g of three) g.abort('rank 2 is gone');
      await closeWorld([...three, ...two, ...fresh.groups]);
    },
  );

  it("a newcomer weighs 0 in the fragment issued after its join (afterInnerStep weight): the average is the contributors'", async () => {
    const seed = newSeed('streamed elastic weight');
    const options = { innerSteps: 4, fragments: 2, overlap: 0, compression: 'f32' } as const;
    const make = (groups: ProcessGroup[]) => dilocoWorld(groups, seed, options);
    // Rank 2 of 3 has no pseudo-gradient (it holds the global copy, as a newcomer does); ranks 0
    // and 1 train as the 2 ranks of a world without it. Fragment 1 is issued after step 2.
    const three = createLocalGroups(3);
    const two = createLocalGroups(2);
    const withNewcomer = await make(three);
    const plain = await make(two);
    const contributors = 3 / 2;
    for (let step = 1; step <= 2; step++) {
      for (const world of [withNewcomer, plain]) {
        for (const r of [0, 1]) await nudge(world.models[r]!, seed, r, step);
      }
      const weights = step === 2 ? [contributors, contributors, 0] : [1, 1, 1];
      await Promise.all(
        withNewcomer.dilocos.map((d, r) => d.afterInnerStep({ weight: weights[r]! })),
      );
      await Promise.all(plain.dilocos.map((d) => d.afterInnerStep()));
    }
    const expected = plain.dilocos[0]!.globalParameters();
    // Fragment 1 was applied: its outer step moved the global copy from the start.
    expect(withNewcomer.dilocos[0]!.outerStep).toBe(1);
    for (const d of withNewcomer.dilocos) {
      const global = d.globalParameters();
      for (let i = 0; i < expected.length; i++) expect(global[i]).toBeCloseTo(expected[i]!, 6);
    }
    await expect(withNewcomer.dilocos[0]!.afterInnerStep({ weight: -1 })).rejects.toThrow(
      'weight must be a finite number >= 0, got -1',
    );
    await closeWorld([...three, ...two]);
  });
});
