// namedParameters outside summonFullParams: with flattenParameters false each shard is named after
// the parameter it holds (fairscale's test_fsdp.py, TestModuleProperties.test_named_parameters:
// names equal the unwrapped model's in order; with flattening the first is `flat_param_0`), after
// a training step, at 2 and 4 local ranks. Nested units list their shards in the unwrapped model's
// order too ([Note: the order of named shards]), and so do the optimizer's state and the full
// state dict built from them.
import {
  AdamW,
  type Backend,
  createCpuBackend,
  Linear,
  Module,
  RandomGenerator,
  Sequential,
  sum,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { type FsdpOptions, FullyShardedDataParallel } from './index.js';
import { gatherFullOptimStateDict } from './optim-state.js';
import { fullStateDict } from './state-dict.js';
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

    it(`flattenParameters false, nested units: the unwrapped names in order, world ${world}`, async () => {
      for (const r of await namesAfterOneStep(world, false, true)) {
        expect(r.outside).toEqual(before);
        expect(r.inside).toEqual(beforeShapes);
      }
    });

    it(`flattenParameters true: flat_param_0 first, units in module order, world ${world}`, async () => {
      for (const r of await namesAfterOneStep(world, true, true)) {
        expect(r.outside).toEqual([
          'flat_param_0',
          'blocks.0.flat_param_0',
          'blocks.1.flat_param_0',
          'blocks.2.flat_param_0',
        ]);
        expect(r.inside).toEqual(beforeShapes);
      }
    });
  }
});

/**
 * fairscale's `NestedWrappedModule` (test_fsdp.py): `Sequential(Linear(8, 4), FSDP(Sequential(
 * FSDP(Linear(4, 16)), Linear(16, 16))), FSDP(Linear(16, 4)), Linear(4, 8))`, loss `output.sum()`;
 * `wrap` null leaves it unwrapped.
 */
class NestedWrappedModule extends Module<[Tensor], Promise<Tensor>> {
  readonly module: Sequential;
  constructor(backend: Backend, wrap: ((m: Module<[Tensor], Tensor>) => Module) | null) {
    super();
    const generator = new RandomGenerator(0);
    const maybe = (m: Module<[Tensor], Tensor>) =>
      (wrap === null ? m : wrap(m)) as Module<[Tensor], Tensor>;
    const linear = (i: number, o: number) => new Linear(i, o, { backend, generator });
    this.module = this.registerModule(
      'module',
      new Sequential(
        linear(8, 4),
        maybe(new Sequential(maybe(linear(4, 16)), linear(16, 16))),
        maybe(linear(16, 4)),
        linear(4, 8),
      ),
    );
  }
  async forward(x: Tensor): Promise<Tensor> {
    return await this.module.callAsync(x);
  }
}

/** fairscale's `get_input`: 4 x 8 values in [0, 1), different on each rank. */
function nestedInput(backend: Backend, rank: number): Tensor {
  const rows = Array.from({ length: 4 }, (_, i) =>
    Array.from({ length: 8 }, (_, j) => (Math.sin(1 + rank * 97 + i * 8 + j) + 1) / 2),
  );
  return tensor(rows, { backend });
}

interface NestedNames {
  outside: string[];
  shapes: number[][];
  inside: string[];
  optimState: string[];
  optimGroup: string[];
  stateDict: string[];
}

/** The nested model wrapped with `options` in every unit, after one AdamW step. */
async function nestedNamesAfterOneStep(
  world: number,
  options: Omit<FsdpOptions, 'group'>,
): Promise<NestedNames[]> {
  return onLocalRanks(world, async (group, backend) => {
    const wrap = (m: Module<[Tensor], Tensor>) =>
      new FullyShardedDataParallel(m, { ...options, group });
    const model = new FullyShardedDataParallel(new NestedWrappedModule(backend, wrap), {
      ...options,
      group,
    });
    const optimizer = new AdamW(model.parameters(), { lr: 0.01 });
    const loss = sum(await model.call(nestedInput(backend, group.rank)));
    await loss.backward();
    optimizer.step();
    const named = model.namedParameters();
    const inside: string[] = [];
    await model.summonFullParams(() => {
      for (const [n] of model.namedParameters()) inside.push(n);
    });
    const optim = (await gatherFullOptimStateDict(model, optimizer, { rank0Only: false }))!;
    const dict = await fullStateDict(model);
    for (const t of dict.values()) t.free();
    return {
      outside: named.map(([n]) => n),
      shapes: named.map(([, p]) => [...p.shape]),
      inside,
      optimState: Object.keys(optim.state),
      optimGroup: optim.param_groups[0]!.params,
      stateDict: [...dict.keys()],
    };
  });
}

describe('nested units list their shards in the unwrapped model’s order (test_named_parameters)', () => {
  const plain = new NestedWrappedModule(createCpuBackend(), null).namedParameters();
  const before = plain.map(([n]) => n);
  it('the unwrapped model is 0, 1.0, 1.1, 2, 3', () => {
    expect(before).toEqual([
      'module.0.weight',
      'module.0.bias',
      'module.1.0.weight',
      'module.1.0.bias',
      'module.1.1.weight',
      'module.1.1.bias',
      'module.2.weight',
      'module.2.bias',
      'module.3.weight',
      'module.3.bias',
    ]);
  });
  for (const world of [2, 4]) {
    it(`flattenParameters false: names, shards, optimizer state and state dict in order, world ${world}`, async () => {
      for (const r of await nestedNamesAfterOneStep(world, { flattenParameters: false })) {
        expect(r.outside).toEqual(before);
        for (const [i, [, p]] of plain.entries()) {
          expect(r.shapes[i]).toEqual([Math.max(1, Math.ceil(p.size / world))]);
        }
        expect(r.inside).toEqual(before);
        // An optimizer built over parameters() has its groups and its state in the model's order.
        expect(r.optimGroup).toEqual(before);
        expect(r.optimState).toEqual(before);
        expect(r.stateDict).toEqual(before);
      }
    });

    it(`flattenParameters true: flat_param_0 first, then each unit where it sits, world ${world}`, async () => {
      for (const r of await nestedNamesAfterOneStep(world, { flattenParameters: true })) {
        expect(r.outside).toEqual([
          'flat_param_0',
          'module.1.flat_param_0',
          'module.1.0.flat_param_0',
          'module.2.flat_param_0',
        ]);
        expect(r.inside).toEqual(before);
        // The root's flat parameter holds 0 and 3, so its entries come first.
        expect(r.optimGroup).toEqual([
          'module.0.weight',
          'module.0.bias',
          'module.3.weight',
          'module.3.bias',
          'module.1.1.weight',
          'module.1.1.bias',
          'module.1.0.weight',
          'module.1.0.bias',
          'module.2.weight',
          'module.2.bias',
        ]);
        expect(r.stateDict).toEqual(before);
      }
    });

    it(`the root unflattened, nested units flattened: each where it sits, world ${world}`, async () => {
      const results = await onLocalRanks(world, async (group, backend) => {
        const wrap = (m: Module<[Tensor], Tensor>) => new FullyShardedDataParallel(m, { group });
        const model = new FullyShardedDataParallel(new NestedWrappedModule(backend, wrap), {
          group,
          flattenParameters: false,
        });
        return model.namedParameters().map(([n]) => n);
      });
      for (const names of results) {
        expect(names).toEqual([
          'module.0.weight',
          'module.0.bias',
          'module.1.flat_param_0',
          'module.1.0.flat_param_0',
          'module.2.flat_param_0',
          'module.3.weight',
          'module.3.bias',
        ]);
      }
    });
  }
});
