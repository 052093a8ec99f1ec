import { createLocalGroups, type ElasticGroup } from '@webshard/collectives';
import { DiLoCo } from '@webshard/diloco';
import {
  AdamW,
  createCpuBackend,
  Linear,
  RandomGenerator,
  Sequential,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { globalDigest, shareOuterState } from './elastic-outer.js';
import type { Run } from './set-up.js';

// [Note: streamed syncs in an elastic world]: after a change every member of a streamed world takes
// rank 0's global copy, outer momentum and step counts, a survivor keeping its own parameters and
// residuals: the commit that makes one global copy of members whose landings went differently
// before the loss (one landed a fragment, the other's landing failed), and one fragment schedule
// of members whose inner-step counts differ (a failed member skipped its fragment work).
const backend = createCpuBackend();

async function member(group: ElasticGroup['group']) {
  const model = new Sequential(
    new Linear(4, 8, { backend, generator: new RandomGenerator(3) }),
    new Linear(8, 2, { backend, generator: new RandomGenerator(5) }),
  );
  const params = model.parameters();
  const optimizer = new AdamW(params);
  const diloco = await DiLoCo.create(params, optimizer, {
    group,
    innerSteps: 8,
    fragments: 2,
    overlap: 2,
    compression: 'int8',
    broadcast: false,
  });
  const run = { prepared: { outer: { diloco }, params }, optimizer } as unknown as Run;
  return { run, diloco, params };
}

const read = async (params: { read(): Promise<unknown> }[]) =>
  Promise.all(params.map(async (p) => Float32Array.from((await p.read()) as Float32Array)));

describe('shareOuterState in a streamed world', () => {
  it('a survivor takes rank 0 global copy, momentum and the world step count, and keeps its parameters', async () => {
    const groups = createLocalGroups(2);
    const [lead, survivor] = await Promise.all(groups.map(member));
    // The survivor's global copy went elsewhere (a fragment applied here and not on rank 0), its
    // count of inner steps lags (fragment work skipped after a failed landing), its parameters
    // trained on.
    const state = survivor!.diloco.stateDict();
    await survivor!.diloco.loadStateDict({
      ...state,
      innerStep: 5,
      global: state.global.map((v, i) => v + 0.01 * ((i % 7) - 3)),
    });
    for (const p of survivor!.params) {
      p.write(((await p.read()) as Float32Array).map((v, i) => v - 0.02 * ((i % 5) - 2)));
    }
    const trained = await read(survivor!.params);
    expect(await globalDigest(survivor!.run)).not.toBe(await globalDigest(lead!.run));
    const shared = await Promise.all(
      [lead!, survivor!].map((m, r) =>
        shareOuterState(m.run, { group: groups[r]! } as ElasticGroup, 8, true, false),
      ),
    );
    expect(shared.map(({ step, pending }) => [step, pending])).toEqual([
      [8, true],
      [8, true],
    ]);
    expect(await globalDigest(survivor!.run)).toBe(await globalDigest(lead!.run));
    // At the meeting after step 8 the next fragment work counts step 8 on both: one schedule.
    expect([lead!.diloco.innerStep, survivor!.diloco.innerStep]).toEqual([7, 7]);
    expect(await read(survivor!.params)).toEqual(trained);
    await Promise.all(groups.map((g) => g.close()));
  });
});

describe('shareOuterState in a fresh world', () => {
  it('sends no global copy or momentum that every member built from the seed, and a member that differs takes rank 0s', async () => {
    const groups = createLocalGroups(3);
    const members = await Promise.all(groups.map(member));
    // Rank 2's global copy is not the seed's (another initialization, say).
    const odd = members[2]!.diloco.stateDict();
    await members[2]!.diloco.loadStateDict({ ...odd, global: odd.global.map((v) => v * 2) });
    const share = (ranks: number[]) =>
      Promise.all(
        ranks.map((r) =>
          shareOuterState(
            members[r]!.run,
            { group: groups[r]! } as ElasticGroup,
            4,
            true,
            true,
            true,
          ),
        ),
      );
    const first = await share([0, 1, 2]);
    // No sync has run, so there is no momentum buffer yet; the global copy went (rank 2 differed).
    expect(members[0]!.diloco.stateDict().momentumBuffer).toBeNull();
    for (const s of first) expect(s.skipped).toEqual([]);
    const digest = await globalDigest(members[0]!.run);
    for (const m of members) expect(await globalDigest(m.run)).toBe(digest);
    // Now every member holds the same state: nothing of it moves, and the bytes say so.
    const again = await share([0, 1, 2]);
    for (const s of again) {
      expect(s.skipped).toEqual(['outer.global']);
      expect([s.step, s.pending]).toEqual([4, true]);
    }
    // The step's text and AdamW's groups moved again; the global copy's bytes did not.
    const globalBytes = 4 * members[0]!.diloco.stateDict().global.length;
    expect(again[1]!.bytes).toBe(first[1]!.bytes - globalBytes);
    await Promise.all(groups.map((g) => g.close()));
  });
});
