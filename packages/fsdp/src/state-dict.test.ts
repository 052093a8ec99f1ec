import { AdamW, createCpuBackend, GPTBlock, type Tensor } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import {
  consolidateShardWeights,
  FsdpStateDictError,
  fullStateDict,
  loadFullStateDict,
  localStateDict,
} from './state-dict.js';
import { Gpt, TINY_GPT, tokenBatches, tokenSlice } from './test-support/gpt.js';
import { onLocalRanks } from './test-support/ranks.js';
import { autoWrap, moduleClassAutoWrapPolicy } from './wrap.js';

async function values(dict: Map<string, Tensor>): Promise<Map<string, number[]>> {
  const out = new Map<string, number[]>();
  for (const [k, t] of dict) out.set(k, [...(await t.read())]);
  return out;
}

function wrapGpt(
  group: Parameters<Parameters<typeof onLocalRanks>[1]>[0],
  backend: Parameters<Parameters<typeof onLocalRanks>[1]>[1],
  seed = 0,
) {
  return autoWrap(new Gpt(TINY_GPT, backend, seed), moduleClassAutoWrapPolicy([GPTBlock]), {
    group,
  });
}

/** Train `steps` steps at `world` ranks from seed 0 and return every rank's full state dict. */
async function trainedFull(world: number, steps: number): Promise<Map<string, number[]>[]> {
  return onLocalRanks(world, async (group, backend) => {
    const model = wrapGpt(group, backend);
    const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
    const per = 8 / world;
    for (const rows of tokenBatches(TINY_GPT, steps, 8)) {
      const [x, y] = tokenSlice(backend, rows, group.rank * per, (group.rank + 1) * per);
      const loss = await model.call(x, y);
      await loss.backward();
      optimizer.step();
      optimizer.zeroGrad();
    }
    return values(await fullStateDict(model));
  });
}

describe('fullStateDict', () => {
  it('is the unwrapped model’s state dict (the tied weight once) at 1, 2 and 4 ranks', async () => {
    const plain = new Gpt(TINY_GPT, createCpuBackend());
    const expected = new Map<string, number[]>();
    for (const [k, t] of plain.namedParameters()) expected.set(k, [...(await t.read())]);
    expect(expected.has('transformer.wte.weight')).toBe(true);
    expect(expected.has('lm_head.weight')).toBe(false);
    for (const world of [1, 2, 4]) {
      const dicts = await onLocalRanks(world, async (group, backend) =>
        values(await fullStateDict(wrapGpt(group, backend))),
      );
      for (const d of dicts) {
        expect([...d.keys()].sort()).toEqual([...expected.keys()].sort());
        expect(d).toEqual(expected);
      }
    }
  });

  it('rank0Only leaves the other ranks empty', async () => {
    const sizes = await onLocalRanks(
      2,
      async (group, backend) =>
        (await fullStateDict(wrapGpt(group, backend), { rank0Only: true })).size,
    );
    expect(sizes[0]).toBeGreaterThan(0);
    expect(sizes[1]).toBe(0);
  });
});

describe('save at N, load at M', () => {
  it('gives the same full parameters bit for bit for every pair in {1, 2, 4}', async () => {
    for (const n of [1, 2, 4]) {
      const [saved] = await trainedFull(n, 2);
      for (const m of [1, 2, 4]) {
        const reloaded = await onLocalRanks(m, async (group, backend) => {
          const model = wrapGpt(group, backend, 99);
          const host = createCpuBackend();
          const dict = new Map<string, Tensor>();
          for (const [k, v] of saved!) {
            const { tensor } = await import('@webshard/tensor-core');
            dict.set(k, tensor(v, { backend: host }).view([v.length]));
          }
          // Shapes come from the plain model: reshape the flat values to them.
          const plain = new Gpt(TINY_GPT, host);
          for (const [k, t] of plain.namedParameters()) dict.set(k, dict.get(k)!.view(t.shape));
          await loadFullStateDict(model, dict);
          return values(await fullStateDict(model));
        });
        for (const r of reloaded) expect(r, `saved at ${n}, loaded at ${m}`).toEqual(saved);
      }
    }
  });
});

describe('loadFullStateDict refuses what does not fit, changing nothing', () => {
  it('a missing key, an unexpected key and a wrong shape, all in one error', async () => {
    await onLocalRanks(2, async (group, backend) => {
      const model = wrapGpt(group, backend);
      const before = await values(await fullStateDict(model));
      const donor = new Gpt(TINY_GPT, createCpuBackend(), 5);
      const dict = new Map(donor.namedParameters());
      dict.delete('transformer.ln_f.bias');
      dict.set('extra.weight', donor.gpt.wte.weight);
      dict.set('transformer.wpe.weight', donor.gpt.lnF.weight!);
      const error = await loadFullStateDict(model, dict).then(
        () => null,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(FsdpStateDictError);
      const e = error as FsdpStateDictError;
      expect(e.missingKeys).toEqual(['transformer.ln_f.bias']);
      expect(e.unexpectedKeys).toEqual(['extra.weight']);
      expect(e.shapeMismatches).toEqual([
        'shape mismatch for transformer.wpe.weight: checkpoint [16], model [8, 16]',
      ]);
      expect(await values(await fullStateDict(model))).toEqual(before);
    });
  });
});

describe('localStateDict and consolidateShardWeights', () => {
  it('rebuild the full state dict offline from every rank’s shards', async () => {
    for (const world of [2, 4]) {
      const [full, ...rest] = await onLocalRanks(world, async (group, backend) => {
        const model = wrapGpt(group, backend);
        return { full: await values(await fullStateDict(model)), local: localStateDict(model) };
      });
      const locals = [full!, ...rest].map((r) => r.local);
      expect(locals[0]!.layout.worldSize).toBe(world);
      const consolidated = await values(await consolidateShardWeights(locals));
      expect(consolidated).toEqual(full!.full);
      await expect(consolidateShardWeights(locals.slice(1))).rejects.toThrow(FsdpStateDictError);
    }
  });
});
