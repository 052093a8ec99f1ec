// A unit called several times in one forward under activation checkpointing: transcribed from
// fairscale's test_fsdp_multiple_forward_checkpoint.py (the batch is a list of three inputs, each
// through block1, block2 and head; block2 is FSDP(checkpoint_wrapper(block2)); results against
// training without FSDP), with the checkpoint inside the unit and around it, at 2 and 4 local
// ranks. Every rank sees the same batch, as in fairscale's test.
import {
  type Backend,
  checkpoint,
  createCpuBackend,
  concat,
  Linear,
  Module,
  mean,
  RandomGenerator,
  relu,
  SGD,
  square,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { onLocalRanks } from './test-support/ranks.js';

/** relu(fc(x)), its inside recomputed in backward when `checkpointed`. */
class Block extends Module<[Tensor], Tensor> {
  readonly fc: Linear;
  constructor(
    inFeatures: number,
    outFeatures: number,
    backend: Backend,
    generator: RandomGenerator,
    private readonly checkpointed: boolean,
  ) {
    super();
    this.fc = this.registerModule(
      'fc',
      new Linear(inFeatures, outFeatures, { backend, generator }),
    );
  }
  forward(x: Tensor): Tensor {
    const inner = (input: Tensor): Tensor => {
      const h = this.fc.call(input);
      const out = relu(h);
      h.free();
      return out;
    };
    return this.checkpointed ? (checkpoint(inner, x) as Tensor) : inner(x);
  }
}

type Where = 'none' | 'inside' | 'around';

/** block1 -> block2 -> head on each input of the list, the outputs concatenated. */
class Model extends Module<[Tensor[]], Promise<Tensor>> {
  readonly block1: Module<[Tensor], unknown>;
  readonly block2: Module<[Tensor], unknown>;
  readonly head: Module<[Tensor], unknown>;
  constructor(
    backend: Backend,
    private readonly where: Where,
    wrap: (m: Module<[Tensor], unknown>) => Module<[Tensor], unknown> = (m) => m,
  ) {
    super();
    const generator = new RandomGenerator(0);
    this.block1 = this.registerModule('block1', wrap(new Block(3, 4, backend, generator, false)));
    this.block2 = this.registerModule(
      'block2',
      wrap(new Block(4, 8, backend, generator, where === 'inside')),
    );
    this.head = this.registerModule('head', wrap(new Linear(8, 2, { backend, generator })));
  }
  async forward(xs: Tensor[]): Promise<Tensor> {
    const ys: Tensor[] = [];
    for (const x of xs) {
      const a = (await this.block1.call(x)) as Tensor;
      const b =
        this.where === 'around'
          ? await checkpoint(async (t: Tensor) => (await this.block2.call(t)) as Tensor, a)
          : ((await this.block2.call(a)) as Tensor);
      ys.push((await this.head.call(b)) as Tensor);
      a.free();
      b.free();
    }
    const out = concat(ys, 0);
    for (const y of ys) y.free();
    return out;
  }
}

/** Three inputs of 2 rows (fairscale's batch is a list of three tensors). */
function batch(step: number): number[][][] {
  let state = 17 + step;
  const next = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32 - 0.5;
  };
  return [0, 1, 2].map(() => Array.from({ length: 2 }, () => [next(), next(), next()]));
}

async function train(
  model: Module<[Tensor[]], Promise<Tensor>>,
  params: Tensor[],
  backend: Backend,
): Promise<number[]> {
  const optimizer = new SGD(params, { lr: 0.1 });
  const losses: number[] = [];
  for (let step = 0; step < 3; step++) {
    const xs = batch(step).map((rows) => tensor(rows, { backend }));
    const out = await model.call(xs);
    const sq = square(out);
    const loss = mean(sq);
    losses.push(await loss.item());
    await loss.backward();
    optimizer.step();
    optimizer.zeroGrad();
    for (const t of [...xs, out, sq, loss]) t.free();
  }
  return losses;
}

describe('a unit called several times in one forward under checkpointing (test_fsdp_multiple_forward_checkpoint)', () => {
  for (const where of ['inside', 'around'] as const) {
    for (const world of [2, 4]) {
      it(`checkpoint ${where} the unit, world ${world}`, async () => {
        const backend = createCpuBackend();
        const plain = new Model(backend, 'none');
        const losses = await train(plain, plain.parameters(), backend);
        const expected = new Map<string, number[]>();
        for (const [name, p] of plain.namedParameters()) expected.set(name, [...(await p.read())]);
        const results = await onLocalRanks(world, async (group, b) => {
          const net = new Model(b, where, (m) => new FullyShardedDataParallel(m, { group }));
          const model = new FullyShardedDataParallel(net, { group });
          const got = await train(model, model.parameters(), b);
          const params = new Map<string, number[]>();
          await model.summonFullParams(async () => {
            for (const [name, p] of model.namedParameters())
              params.set(name, [...(await p.read())]);
          });
          for (const u of model.units()) u.assertState('after training', ['IDLE']);
          return { losses: got, params };
        });
        for (const r of results) {
          for (let i = 0; i < losses.length; i++) {
            expect(Math.abs(r.losses[i]! - losses[i]!)).toBeLessThanOrEqual(1e-6);
          }
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
