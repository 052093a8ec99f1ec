// fairscale's reset_parameters behind allow_reset_parameters (test_fsdp.py, TestResetParameters):
// refused by default; allowed, the wrapped module's resetParameters() runs with the full
// parameters and the shards get what the unwrapped model gets, at 2 and 4 local ranks.
import {
  type Backend,
  createCpuBackend,
  Linear,
  Module,
  RandomGenerator,
  randn,
  type Tensor,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { FsdpConfigError } from './errors.js';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { onLocalRanks } from './test-support/ranks.js';

/** Two layers whose resetParameters() draws every weight from N(0, 0.1) with its own seed. */
class Resettable extends Module<[Tensor], Tensor> {
  readonly a: Linear;
  readonly b: Linear;
  constructor(private readonly backend: Backend) {
    super();
    this.a = this.registerModule('a', new Linear(3, 5, { backend }));
    this.b = this.registerModule('b', new Linear(5, 2, { backend }));
  }
  forward(x: Tensor): Tensor {
    const h = this.a.call(x);
    const out = this.b.call(h);
    h.free();
    return out;
  }
  async resetParameters(): Promise<void> {
    const generator = new RandomGenerator(9);
    for (const [, p] of this.namedParameters()) {
      const t = randn(p.shape, { generator, backend: this.backend, std: 0.1 });
      p.write(await t.read());
      t.free();
    }
  }
}

async function weights(model: Module): Promise<Map<string, number[]>> {
  const out = new Map<string, number[]>();
  for (const [name, p] of model.namedParameters()) out.set(name, [...(await p.read())]);
  return out;
}

describe('resetParameters', () => {
  for (const world of [2, 4]) {
    it(`with allowResetParameters the shards get the unwrapped model's reset weights, world ${world}`, async () => {
      const plain = new Resettable(createCpuBackend());
      await plain.resetParameters();
      const expected = await weights(plain);
      const results = await onLocalRanks(world, async (group, backend) => {
        const model = new FullyShardedDataParallel(new Resettable(backend), {
          group,
          allowResetParameters: true,
        });
        await model.resetParameters();
        let out = new Map<string, number[]>();
        await model.summonFullParams(async () => {
          out = await weights(model);
        });
        return out;
      });
      for (const r of results) expect(r).toEqual(expected);
    });
  }

  it('is refused without allowResetParameters, and for a module without resetParameters', async () => {
    await onLocalRanks(2, async (group, backend) => {
      const model = new FullyShardedDataParallel(new Resettable(backend), { group });
      await expect(model.resetParameters()).rejects.toThrow(
        new FsdpConfigError(
          'resetParameters',
          `unit '<root>' rank ${group.rank}: resetting parameters after wrapping is not allowed: pass allowResetParameters: true`,
        ),
      );
      const linear = new FullyShardedDataParallel(new Linear(2, 2, { backend }), {
        group,
        allowResetParameters: true,
      });
      await expect(linear.resetParameters()).rejects.toThrow(
        `unit '<root>' rank ${group.rank}: Linear has no resetParameters()`,
      );
    });
  });
});
