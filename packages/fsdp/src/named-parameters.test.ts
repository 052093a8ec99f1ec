// namedParameters outside summonFullParams: with flattenParameters false each shard is named after
// the parameter it holds (fairscale's test_fsdp.py, TestModuleProperties.test_named_parameters:
// names equal the unwrapped model's in order; with flattening the first is `flat_param_0`), after
// a training step, at 2 and 4 local ranks.
import { AdamW, createCpuBackend } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { makeBatches, Net, SMALL, slice } from './test-support/models.js';
import { wrapNet } from './test-support/parity.js';
import { onLocalRanks } from './test-support/ranks.js';

async function namesAfterOneStep(
  world: number,
  flattenParameters: boolean,
  nested: boolean,
): Promise<{ outside: string[]; shapes: number[][]; inside: [string, number[]][] }[]> {
  const batch = makeBatches(createCpuBackend(), SMALL, 1, 8)[0]!;
  const rows = 8 / world;
  return onLocalRanks(world, async (group, backend) => {
    const model = wrapNet(new Net(SMALL, backend, 0), group, { flattenParameters }, nested);
    const optimizer = new AdamW(model.parameters(), { lr: 0.01 });
    const [x, y] = slice(backend, batch, group.rank * rows, (group.rank + 1) * rows);
    const loss = await model.call(x, y);
    await loss.backward();
    optimizer.step();
    const named = model.namedParameters();
    const inside: [string, number[]][] = [];
    await model.summonFullParams(() => {
      for (const [n, p] of model.namedParameters()) inside.push([n, [...p.shape]]);
    });
    return {
      outside: named.map(([n]) => n),
      shapes: named.map(([, p]) => [...p.shape]),
      inside,
    };
  });
}

describe('namedParameters keeps the module’s names (test_named_parameters)', () => {
  const plain = new Net(SMALL, createCpuBackend(), 0).namedParameters();
  const before = plain.map(([n]) => n);
  const beforeShapes = plain.map(([n, p]) => [n, [...p.shape]] as [string, number[]]);
  for (const world of [2, 4]) {
    it(`flattenParameters false, one unit: the unwrapped names in order, world ${world}`, async () => {
      for (const r of await namesAfterOneStep(world, false, false)) {
        expect(r.outside).toEqual(before);
        // Each is this rank's shard of that parameter.
        for (const [i, [, p]] of plain.entries()) {
          expect(r.shapes[i]).toEqual([Math.max(1, Math.ceil(p.size / world))]);
        }
        expect(r.inside).toEqual(beforeShapes);
      }
    });

    it(`flattenParameters false, nested units: the unwrapped names, world ${world}`, async () => {
      for (const r of await namesAfterOneStep(world, false, true)) {
        expect([...r.outside].sort()).toEqual([...before].sort());
        expect([...r.inside].sort()).toEqual([...beforeShapes].sort());
      }
    });

    it(`flattenParameters true: flat_param_0 first, world ${world}`, async () => {
      for (const r of await namesAfterOneStep(world, true, true)) {
        expect(r.outside[0]).toBe('flat_param_0');
        expect(r.outside).toContain('blocks.0.flat_param_0');
        expect([...r.inside].sort()).toEqual([...beforeShapes].sort());
      }
    });
  }
});
