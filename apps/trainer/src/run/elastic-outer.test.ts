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
