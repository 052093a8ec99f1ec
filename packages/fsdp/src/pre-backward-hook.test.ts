// fairscale's test_fsdp_pre_backward_hook.py: a model whose forward returns a nested unit's output
// beside its own, `(l3(l2(l1(x))), l2(l1(x)))` with l2 a unit, the root unflattened. With the loss
// from `out` alone the root's hook on the returned inner tensor fires late in backward (its
// gradient comes through l3), after l3's parameters were reduced and freed; it must not gather
// them again ([Note: outputs of nested units]). Counted exactly: 6 all-gathers a step (the root's
// 4 and l2's 1 in forward, l2's once in backward; the root keeps its parameters), and the
// gradients those of single-process training, at 2 and 4 local ranks. With the loss from `inner`
// alone (fairscale would hook no root output on it) the root's hook on it starts its backward.
import type { ProcessGroup } from '@webshard/collectives';
import {
  add,
  type Backend,
  createCpuBackend,
  Linear,
  Module,
  mul,
  RandomGenerator,
  sum,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { flatParamsOf, shardedLayout } from './layout.js';
import { onLocalRanks, recordOps } from './test-support/ranks.js';

/** fairscale's `Model`: l1, l2 (a unit when `group` is given), l3; returns `(out, inner)`. */
class HookModel extends Module<[Tensor], Promise<[Tensor, Tensor]>> {
  readonly l1: Linear;
  readonly l2: Module<[Tensor], unknown>;
  readonly l3: Linear;
  constructor(backend: Backend, group: ProcessGroup | null) {
    super();
    const generator = new RandomGenerator(0);
    this.l1 = this.registerModule('l1', new Linear(4, 4, { backend, generator }));
    const l2 = new Linear(4, 4, { backend, generator });
    this.l2 = this.registerModule(
      'l2',
      group === null ? l2 : new FullyShardedDataParallel(l2, { group }),
    );
    this.l3 = this.registerModule('l3', new Linear(4, 4, { backend, generator }));
  }
  async forward(x: Tensor): Promise<[Tensor, Tensor]> {
    const h = this.l1.call(x);
    const inner = (await this.l2.callAsync(h)) as Tensor;
    h.free();
    return [this.l3.call(inner), inner];
  }
}

type LossFrom = 'out' | 'both' | 'inner';

function lossOf([out, inner]: [Tensor, Tensor], from: LossFrom): Tensor {
  if (from === 'out') return sum(out);
  if (from === 'inner') return sum(inner);
  const a = sum(out);
  const b = sum(inner);
  const loss = add(a, b);
  a.free();
  b.free();
  return loss;
}

/** fairscale's `torch.rand(1, 4)` input: one row a rank, different on each rank and step. */
function inputRow(rank: number, step: number): number[] {
  return Array.from({ length: 4 }, (_, j) => (Math.sin(1 + 13 * rank + 5 * step + j) + 1) / 2);
}

const STEPS = 3;

const DESCRIBE: Record<LossFrom, string> = {
  out: 'out alone',
  both: 'both outputs',
  // fairscale hooks no root hook on `inner`: here it starts the root's backward.
  inner: 'inner alone (l3 gets none)',
};

/** Single-process gradients of the mean over ranks of each rank's loss, by name, each step. */
async function referenceGrads(world: number, from: LossFrom): Promise<Map<string, number[]>[]> {
  const backend = createCpuBackend();
  const model = new HookModel(backend, null);
  const out: Map<string, number[]>[] = [];
  for (let step = 0; step < STEPS; step++) {
    for (let rank = 0; rank < world; rank++) {
      const x = tensor([inputRow(rank, step)], { backend });
      const outputs = await model.call(x);
      const loss = lossOf(outputs, from);
      const scaled = mul(loss, 1 / world);
      await scaled.backward();
      for (const t of [x, loss, scaled, ...outputs]) t.free();
    }
    const grads = new Map<string, number[]>();
    for (const [name, p] of model.namedParameters()) {
      grads.set(
        name,
        p.grad === null ? new Array<number>(p.size).fill(0) : [...(await p.grad.read())],
      );
    }
    out.push(grads);
    model.zeroGrad();
  }
  return out;
}

/** This rank's slice of the reference gradients, laid out as each shard. */
function expectedShardGrads(
  model: FullyShardedDataParallel,
  reference: Map<string, number[]>,
): number[][] {
  const { rank } = model.options.group;
  return shardedLayout(model).flatParams.map((fl) => {
    const full = new Array<number>(fl.paddedNumel).fill(0);
    for (const e of fl.entries) full.splice(e.offset, e.numel, ...reference.get(e.names[0]!)!);
    const shard = fl.paddedNumel / model.options.group.size;
    return full.slice(rank * shard, (rank + 1) * shard);
  });
}

async function train(
  world: number,
  from: LossFrom,
): Promise<{ gathers: number[]; grads: number[][][]; expected: number[][][] }[]> {
  const reference = await referenceGrads(world, from);
  return onLocalRanks(world, async (group, backend) => {
    const model = new FullyShardedDataParallel(new HookModel(backend, group), {
      group,
      flattenParameters: false,
    });
    const log: string[] = [];
    recordOps(group, log);
    const gathers: number[] = [];
    const grads: number[][][] = [];
    const expected: number[][][] = [];
    for (let step = 0; step < STEPS; step++) {
      log.length = 0;
      const x = tensor([inputRow(group.rank, step)], { backend });
      const outputs = (await model.call(x)) as [Tensor, Tensor];
      const loss = lossOf(outputs, from);
      await loss.backward();
      gathers.push(log.filter((op) => op === 'allGather').length);
      grads.push(
        await Promise.all(
          flatParamsOf(model).map(async ({ flat }) => {
            const g = flat.shard.grad;
            return g === null ? new Array<number>(flat.shardNumel).fill(0) : [...(await g.read())];
          }),
        ),
      );
      expected.push(expectedShardGrads(model, reference[step]!));
      for (const t of [x, loss, ...outputs]) t.free();
      model.zeroGrad();
    }
    return { gathers, grads, expected };
  });
}

describe('a nested unit’s output returned beside the root’s (test_pre_backward_hook)', () => {
  for (const world of [2, 4]) {
    for (const from of ['out', 'both', 'inner'] as const) {
      it(`loss from ${DESCRIBE[from]}: 6 all-gathers a step, the reference's gradients, world ${world}`, async () => {
        for (const r of await train(world, from)) {
          expect(r.gathers).toEqual([6, 6, 6]);
          for (const [step, shards] of r.grads.entries()) {
            for (const [i, got] of shards.entries()) {
              const want = r.expected[step]![i]!;
              expect(got.length).toBe(want.length);
              for (const [j, v] of got.entries()) expect(v).toBeCloseTo(want[j]!, 5);
            }
          }
        }
      });
    }
  }
});
