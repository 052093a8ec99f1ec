// Gradient accumulation with nested units: transcribed from fairscale's test_fsdp_grad_acc.py
// (TestGradAccCommunication.test_communication_nested on NestedWrappedModule: a root and three
// units, one inside another; bucketing off; the collectives counted through a no_sync step and a
// synchronized one: 2n-1 all-gathers a step with resharding, n then none without, n
// reduce-scatters) and _test_grad_acc (the accumulated gradients are those of one process on the
// whole batch), at 2 and 4 local ranks.
import {
  type Backend,
  createCpuBackend,
  Linear,
  Module,
  mul,
  RandomGenerator,
  SGD,
  sum,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { onLocalRanks, recordOps } from './test-support/ranks.js';

/** Layers run in order, awaiting each (units are async). */
class Chain extends Module<[Tensor], Promise<Tensor>> {
  constructor(readonly layers: Module<[Tensor], unknown>[]) {
    super();
    for (const [i, l] of layers.entries()) this.registerModule(String(i), l);
  }
  async forward(x: Tensor): Promise<Tensor> {
    let h = x;
    for (const layer of this.layers) {
      const next = (await layer.call(h)) as Tensor;
      if (h !== x) h.free();
      h = next;
    }
    return h;
  }
}

/** fairscale's NestedWrappedModule: Linear(8,4), wrap(Chain(wrap(Linear(4,16)), Linear(16,16))), wrap(Linear(16,4)), Linear(4,8). */
function nestedWrapped(backend: Backend, wrap: (m: Module) => Module): Chain {
  const generator = new RandomGenerator(0);
  const linear = (i: number, o: number) => new Linear(i, o, { backend, generator });
  return new Chain([
    linear(8, 4),
    wrap(new Chain([wrap(linear(4, 16)) as Module<[Tensor], unknown>, linear(16, 16)])),
    wrap(linear(16, 4)),
    linear(4, 8),
  ] as Module<[Tensor], unknown>[]);
}

/** Rank r's two micro-batches, 4 rows of 8 each. */
function microBatches(rank: number): number[][][] {
  let state = 1 + rank;
  const next = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
  return [0, 1].map(() => Array.from({ length: 4 }, () => Array.from({ length: 8 }, next)));
}

async function backwardOn(
  model: Module<[Tensor], Promise<Tensor>>,
  rows: number[][],
  backend: Backend,
  scale = 1,
): Promise<void> {
  const x = tensor(rows, { backend });
  const out = await model.call(x);
  const s = sum(out);
  const loss = scale === 1 ? s : mul(s, scale);
  await loss.backward();
  for (const t of new Set([x, out, s, loss])) t.free();
}

const LR = 0.1;

/** One process: the gradient of every rank's micro-batches (sum / world), one SGD step. */
async function reference(world: number): Promise<Map<string, number[]>> {
  const backend = createCpuBackend();
  const model = nestedWrapped(backend, (m) => m);
  for (let r = 0; r < world; r++) {
    for (const rows of microBatches(r)) await backwardOn(model, rows, backend, 1 / world);
  }
  const optimizer = new SGD(model.parameters(), { lr: LR });
  optimizer.step();
  const out = new Map<string, number[]>();
  for (const [name, p] of model.namedParameters()) out.set(name, [...(await p.read())]);
  return out;
}

describe('gradient accumulation with nested units (test_fsdp_grad_acc)', () => {
  for (const reshardAfterForward of [true, false]) {
    for (const world of [2, 4]) {
      it(`all-gathers ${reshardAfterForward ? '2n-1 = 7 a step' : 'n = 4, then none'}, n = 4 reduce-scatters, and one process's gradients; reshardAfterForward ${reshardAfterForward}, world ${world}`, async () => {
        const expected = await reference(world);
        const results = await onLocalRanks(world, async (group, backend) => {
          const options = { group, reshardAfterForward, bucketCapMb: 0 };
          const model = new FullyShardedDataParallel(
            nestedWrapped(backend, (m) => new FullyShardedDataParallel(m, options)),
            options,
          );
          expect(model.units()).toHaveLength(4);
          const ops: string[] = [];
          recordOps(group, ops);
          const count = (op: string) => ops.filter((o) => o === op).length;
          const [first, second] = microBatches(group.rank);
          await model.noSync(() => backwardOn(model, first!, backend));
          const inside = { gathers: count('allGather'), scatters: count('reduceScatter') };
          await backwardOn(model, second!, backend);
          const after = { gathers: count('allGather'), scatters: count('reduceScatter') };
          const optimizer = new SGD(model.parameters(), { lr: LR });
          optimizer.step();
          optimizer.zeroGrad();
          // A plain step afterwards: n gathers in forward, n - 1 in backward with resharding.
          await backwardOn(model, first!, backend);
          const plain = count('allGather') - after.gathers;
          const params = new Map<string, number[]>();
          await model.summonFullParams(async () => {
            for (const [name, p] of model.namedParameters())
              params.set(name, [...(await p.read())]);
          });
          return { inside, after, plain, params };
        });
        for (const r of results) {
          expect(r.inside).toEqual({ gathers: reshardAfterForward ? 7 : 4, scatters: 0 });
          expect(r.after).toEqual({ gathers: reshardAfterForward ? 13 : 4, scatters: 4 });
          expect(r.plain).toBe(reshardAfterForward ? 7 : 4);
          for (const [name, values] of expected) {
            const got = r.params.get(name)!;
            for (let i = 0; i < values.length; i++) {
              expect(Math.abs(got[i]! - values[i]!), `${name}[${i}]`).toBeLessThanOrEqual(1e-5);
            }
          }
        }
      });
    }
  }
});
