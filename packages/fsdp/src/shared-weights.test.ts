// A parameter shared by two sibling units: transcribed from fairscale's test_fsdp_shared_weights.py
// (l0..l3, Linear(4, 4) each; l1, l2, l3 units inside a root; l1 and l3 share the weight or the
// bias; three SGD steps on sum(out) of one row that every rank sees), against one process without
// FSDP, at 2 and 4 local ranks, flattened and not, inside and outside.
import {
  type Backend,
  createCpuBackend,
  Linear,
  Module,
  matmul,
  RandomGenerator,
  SGD,
  sum,
  type Tensor,
  tensor,
  transpose,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { FsdpWrapError } from './errors.js';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { onLocalRanks } from './test-support/ranks.js';
import { fullStateDict } from './state-dict.js';

type Sharing = 'none' | 'weight' | 'bias';

class Model extends Module<[Tensor], Promise<Tensor>> {
  readonly layers: Module<[Tensor], unknown>[];
  constructor(backend: Backend, sharing: Sharing, wrap?: (l: Linear, flatten: boolean) => Module) {
    super();
    const linear = (seed: number) =>
      new Linear(4, 4, { backend, generator: new RandomGenerator(seed) });
    const [l0, l1, l2, l3] = [linear(1), linear(2), linear(3), linear(4)];
    if (sharing === 'weight') l1.weight = l3.weight;
    if (sharing === 'bias') l1.registerParameter('bias', l3.bias);
    this.layers = [
      l0,
      wrap ? wrap(l1, false) : l1,
      wrap ? wrap(l2, true) : l2,
      wrap ? wrap(l3, false) : l3,
    ] as Module<[Tensor], unknown>[];
    for (const [i, l] of this.layers.entries()) this.registerModule(`l${i}`, l);
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

const INPUT = [[0.3, -0.6, 0.8, 0.1]];

async function train(model: Module<[Tensor], Promise<Tensor>>, params: Tensor[], backend: Backend) {
  const optimizer = new SGD(params, { lr: 0.1 });
  for (let i = 0; i < 3; i++) {
    const x = tensor(INPUT, { backend });
    const out = await model.call(x);
    const loss = sum(out);
    await loss.backward();
    optimizer.step();
    optimizer.zeroGrad();
    for (const t of [x, out, loss]) t.free();
  }
}

async function valuesOf(
  dict: Map<string, Tensor> | [string, Tensor][],
): Promise<Map<string, number[]>> {
  const out = new Map<string, number[]>();
  for (const [k, t] of dict) out.set(k, [...(await t.read())]);
  return out;
}

describe('a weight shared by sibling units (test_fsdp_shared_weights)', () => {
  const cases: [Sharing, boolean, boolean, boolean][] = [];
  for (const sharing of ['none', 'weight', 'bias'] as const) {
    for (const outerFlat of [true, false]) {
      for (const innerFlat of [true, false]) cases.push([sharing, outerFlat, innerFlat, false]);
    }
  }
  // Under mixed precision the owner replaces the shared parameter by a 16-bit one, which the
  // borrower's module then uses too; against the f32 reference, within f16's rounding.
  cases.push(['weight', true, true, true], ['bias', false, false, true]);
  for (const [sharing, outerFlat, innerFlat, mixedPrecision] of cases) {
    const tolerance = mixedPrecision ? 5e-3 : 1e-5;
    for (const world of [2, 4]) {
      const title = `share ${sharing}, outer ${outerFlat ? 'flat' : 'nonflat'}, inner ${innerFlat ? 'flat' : 'nonflat'}${mixedPrecision ? ', mixed precision' : ''}, world ${world}`;
      it(title, async () => {
        const backend = createCpuBackend();
        const plain = new Model(backend, sharing);
        const before = await valuesOf(plain.namedParameters());
        await train(plain, plain.parameters(), backend);
        // The full state dict names a shared parameter once, as namedParameters does.
        const after = await valuesOf(plain.namedParameters());
        expect(after).not.toEqual(before);
        const results = await onLocalRanks(world, async (group, b) => {
          const net = new Model(
            b,
            sharing,
            (l, flat) =>
              new FullyShardedDataParallel(l, {
                group,
                mixedPrecision,
                flattenParameters: flat ? innerFlat : false,
              }),
          );
          const model = new FullyShardedDataParallel(net, {
            group,
            mixedPrecision,
            flattenParameters: outerFlat,
          });
          await train(model, model.parameters(), b);
          return valuesOf(await fullStateDict(model));
        });
        for (const r of results) {
          expect([...r.keys()].sort()).toEqual([...after.keys()].sort());
          for (const [k, v] of after) {
            const got = r.get(k)!;
            for (let i = 0; i < v.length; i++) {
              expect(Math.abs(got[i]! - v[i]!), `${k}[${i}]`).toBeLessThanOrEqual(tolerance);
            }
          }
        }
      });
    }
  }
});

/** Linear(4, 4) of its own bias, and the weight of another layer, reached through a closure. */
class BorrowsWeight extends Module<[Tensor], Tensor> {
  readonly own: Linear;
  constructor(
    backend: Backend,
    private readonly weight: () => Tensor,
  ) {
    super();
    this.own = this.registerModule(
      'own',
      new Linear(4, 4, { backend, generator: new RandomGenerator(8) }),
    );
  }
  forward(x: Tensor): Tensor {
    const h = matmul(x, transpose(this.weight(), 0, 1));
    const out = this.own.call(h);
    h.free();
    return out;
  }
}

/** l0, then a unit around l1, then a unit around BorrowsWeight(l1.weight). */
class Borrowing extends Module<[Tensor], Promise<Tensor>> {
  readonly l1: Linear;
  readonly units: Module<[Tensor], unknown>[];
  constructor(backend: Backend, wrap?: (m: Module) => Module) {
    super();
    this.l1 = new Linear(4, 4, { backend, generator: new RandomGenerator(2) });
    const l0 = new Linear(4, 4, { backend, generator: new RandomGenerator(1) });
    const b = new BorrowsWeight(backend, () => this.l1.weight);
    this.units = [l0, wrap ? wrap(this.l1) : this.l1, wrap ? wrap(b) : b] as Module<
      [Tensor],
      unknown
    >[];
    for (const [i, l] of this.units.entries()) this.registerModule(`l${i}`, l);
  }
  async forward(x: Tensor): Promise<Tensor> {
    let h = x;
    for (const layer of this.units) {
      const next = (await layer.call(h)) as Tensor;
      if (h !== x) h.free();
      h = next;
    }
    return h;
  }
}

describe('appendSharedParam (fairscale: l3.append_shared_param(l1.module.weight))', () => {
  for (const world of [2, 4]) {
    it(`a unit whose module reaches another unit's weight through a closure trains once it is declared, world ${world}`, async () => {
      const backend = createCpuBackend();
      const plain = new Borrowing(backend);
      await train(plain, plain.parameters(), backend);
      const expected = await valuesOf(plain.namedParameters());
      const results = await onLocalRanks(world, async (group, b) => {
        const build = (declare: boolean) => {
          const units: FullyShardedDataParallel[] = [];
          const net = new Borrowing(b, (m) => {
            const unit = new FullyShardedDataParallel(m, { group });
            units.push(unit);
            return unit;
          });
          if (declare) units[1]!.appendSharedParam(net.l1.weight);
          return new FullyShardedDataParallel(net, { group });
        };
        const undeclared = build(false);
        const failure = await undeclared.call(tensor(INPUT, { backend: b })).then(
          () => null,
          (e: Error) => e.message,
        );
        const model = build(true);
        await train(model, model.parameters(), b);
        expect(() =>
          model
            .units()[2]!
            .appendSharedParam(model.units()[1]!.flatParameters[0]!.entries[0]!.param),
        ).toThrow('call it before the first forward');
        return { failure, params: await valuesOf(await fullStateDict(model)) };
      });
      for (const r of results) {
        expect(r.failure).toBe("[permute] tensor 'weight' was used after its storage was freed");
        for (const [k, v] of expected) {
          const got = r.params.get(k)!;
          for (let i = 0; i < v.length; i++) {
            expect(Math.abs(got[i]! - v[i]!), `${k}[${i}]`).toBeLessThanOrEqual(1e-5);
          }
        }
      }
    });
  }

  it('refuses a parameter that no unit holds, or the unit’s own', async () => {
    await onLocalRanks(2, async (group, backend) => {
      const loose = new Linear(2, 2, { backend });
      const unit = new FullyShardedDataParallel(new Linear(2, 2, { backend }), { group });
      expect(() => unit.appendSharedParam(loose.weight)).toThrow(
        new FsdpWrapError(
          'appendSharedParam',
          `unit '<root>' rank ${group.rank}: parameter 'weight' is held by no unit: wrap the module that owns it first`,
        ),
      );
      expect(() => unit.appendSharedParam(unit.flatParameters[0]!.entries[0]!.param)).toThrow(
        `unit '<root>' rank ${group.rank}: parameter 'weight' is this unit's own`,
      );
    });
  });
});
