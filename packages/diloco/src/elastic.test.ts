import { createLocalGroups } from '@webshard/collectives';
import {
  AdamW,
  createCpuBackend,
  Linear,
  RandomGenerator,
  Sequential,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { DiLoCo } from './diloco.js';
import { DilocoStateError } from './errors.js';
import { closeWorld, newSeed, randomValues } from './test-support/worlds.js';

// [Note: DiLoCo in an elastic world]: a sync that fails changes nothing, `regroup` runs it again
// among the survivors, a newcomer loads a member's state and syncs with weight 0.
const backend = createCpuBackend();

function buildModel(seed: number) {
  const generator = new RandomGenerator(seed);
  return new Sequential(new Linear(4, 6, { backend, generator }));
}

type Model = ReturnType<typeof buildModel>;

async function flat(model: Model): Promise<Float32Array> {
  const parts = await Promise.all(model.parameters().map((p) => p.read()));
  return Float32Array.from(parts.flatMap((p) => [...p]));
}

/** Moves every parameter by seeded noise: an inner step's effect, each rank its own. */
async function train(model: Model, seed: number): Promise<void> {
  for (const [i, p] of model.parameters().entries()) {
    const noise = await randomValues(seed * 31 + i, p.size);
    const values = (await p.read()) as Float32Array;
    p.write(values.map((v, k) => v + 0.05 * noise[k]!));
  }
}

async function world(size: number, seed: number, compression: 'f32' | 'int8' | 'topk') {
  const groups = createLocalGroups(size);
  const models = groups.map(() => buildModel(seed));
  const dilocos = await Promise.all(
    groups.map((group, r) =>
      DiLoCo.create(models[r]!.parameters(), new AdamW(models[r]!.parameters()), {
        group,
        innerSteps: 2,
        compression,
        blockSize: 8,
      }),
    ),
  );
  return { groups, models, dilocos };
}

describe('DiLoCo in an elastic world', () => {
  it('a sync that fails leaves everything as it was; regrouped, the survivors sync as a world of 2 would', async () => {
    const seed = newSeed('diloco elastic regroup');
    for (const compression of ['f32', 'int8', 'topk'] as const) {
      const three = await world(3, seed, compression);
      // One sync among 3 first, so that momentum and residuals are not empty.
      for (const [r, m] of three.models.entries()) await train(m, seed + r);
      await Promise.all(three.dilocos.map((d) => d.outerSync()));
      for (const [r, m] of three.models.entries()) await train(m, seed + 10 + r);
      const survivors = three.dilocos.slice(0, 2);
      const before = await Promise.all(
        survivors.map(async (d, r) => ({
          params: await flat(three.models[r]!),
          state: d.stateDict(),
        })),
      );
      // Rank 2 is lost: the survivors' sync fails (their group aborts, as a lost peer aborts it).
      for (const g of three.groups) g.abort('rank 2 is gone');
      const failed = await Promise.allSettled(survivors.map((d) => d.outerSync()));
      expect(failed.map((f) => f.status)).toEqual(['rejected', 'rejected']);
      for (const [r, d] of survivors.entries()) {
        expect(d.state).toBe('failed');
        expect(await flat(three.models[r]!)).toEqual(before[r]!.params);
        expect(d.stateDict()).toEqual(before[r]!.state);
        await expect(d.outerSync()).rejects.toThrow(DilocoStateError);
      }
      // Regrouped onto 2, the sync runs again: the same as two fresh wrappers holding that state.
      const two = createLocalGroups(2);
      for (const [r, d] of survivors.entries()) d.regroup(two[r]!);
      await Promise.all(survivors.map((d) => d.outerSync()));
      const refGroups = createLocalGroups(2);
      const refModels = refGroups.map(() => buildModel(seed));
      const refs = await Promise.all(
        refGroups.map((group, r) =>
          DiLoCo.create(refModels[r]!.parameters(), new AdamW(refModels[r]!.parameters()), {
            group,
            innerSteps: 2,
            compression,
            blockSize: 8,
            broadcast: false,
          }),
        ),
      );
      for (const [r, ref] of refs.entries()) {
        const { state, params } = before[r]!;
        // The shard residuals belong to the old split: regroup drops them.
        ref.loadStateDict({ ...state, shardResidual: null });
        let offset = 0;
        for (const p of refModels[r]!.parameters()) {
          p.write(params.subarray(offset, offset + p.size));
          offset += p.size;
        }
      }
      await Promise.all(refs.map((d) => d.outerSync()));
      for (let r = 0; r < 2; r++) {
        expect(await flat(three.models[r]!)).toEqual(await flat(refModels[r]!));
        expect(survivors[r]!.globalParameters()).toEqual(refs[r]!.globalParameters());
      }
      await closeWorld([...three.groups, ...two, ...refGroups]);
    }
  });

  // Dense codecs average over all n, so the contributors give n / contributors; topk averages each
  // position over the ranks that sent it, and a newcomer sends nothing, so they give 1.
  it.each([
    ['f32', 3 / 2],
    ['topk', 1],
  ] as const)(
    'a newcomer loads a member state bit for bit and, with weight 0, leaves the %s average the contributors',
    async (compression, contributorWeight) => {
      const seed = newSeed(`diloco elastic newcomer ${compression}`);
      const pair = await world(2, seed, compression);
      for (const [r, m] of pair.models.entries()) await train(m, seed + r);
      await Promise.all(pair.dilocos.map((d) => d.outerSync()));
      for (const [r, m] of pair.models.entries()) await train(m, seed + 20 + r);
      // The reference: the pair syncs alone (a copy of each, so the same state syncs twice).
      const copies = await world(2, seed, compression);
      for (const [r, d] of pair.dilocos.entries()) {
        copies.dilocos[r]!.loadStateDict(d.stateDict());
        const params = await flat(pair.models[r]!);
        let offset = 0;
        for (const p of copies.models[r]!.parameters()) {
          p.write(params.subarray(offset, offset + p.size));
          offset += p.size;
        }
      }
      await Promise.all(copies.dilocos.map((d) => d.outerSync()));
      // A newcomer (another init) joins before the pair syncs: it takes rank 0's state.
      const three = createLocalGroups(3);
      const newcomer = buildModel(seed + 999);
      const joined = await DiLoCo.create(newcomer.parameters(), new AdamW(newcomer.parameters()), {
        group: three[2]!,
        innerSteps: 2,
        compression,
        blockSize: 8,
        broadcast: false,
      });
      const state = pair.dilocos[0]!.stateDict();
      joined.loadStateDict({ ...state, residual: null, shardResidual: null });
      expect(await flat(newcomer)).toEqual(state.global);
      for (const [r, d] of pair.dilocos.entries()) d.regroup(three[r]!);
      await Promise.all([
        ...pair.dilocos.map((d) => d.outerSync({ weight: contributorWeight })),
        joined.outerSync({ weight: 0 }),
      ]);
      const want = copies.dilocos[0]!.globalParameters();
      for (const got of [...pair.dilocos, joined].map((d) => d.globalParameters())) {
        for (let i = 0; i < want.length; i++)
          expect(Math.abs(got[i]! - want[i]!)).toBeLessThan(1e-6);
      }
      // Every member of the three holds the same global copy, bit for bit.
      expect(joined.globalParameters()).toEqual(pair.dilocos[0]!.globalParameters());
      expect(await flat(newcomer)).toEqual(await flat(pair.models[1]!));
      await expect(joined.outerSync({ weight: -1 })).rejects.toThrow(
        'weight must be a finite number >= 0, got -1',
      );
      await closeWorld([...pair.groups, ...copies.groups, ...three]);
    },
  );
});
