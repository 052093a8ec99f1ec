// applyFullParams visits modules in Module.apply's order (children before their parent), so an
// initializer that draws random numbers gives the unwrapped model's weights: transcribed from
// fairscale's test_fsdp_apply.py (test_nested_wrapped_weight_init: `model.apply(init_bert_params_)`
// on the wrapped model, then training identical to the unwrapped one), at 2 and 4 local ranks.
import {
  type Backend,
  createCpuBackend,
  Linear,
  type Module,
  RandomGenerator,
  randn,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { Net, SMALL } from './test-support/models.js';
import { wrapNet } from './test-support/parity.js';
import { onLocalRanks } from './test-support/ranks.js';

/** fairscale's `init_bert_params_`: Linear weights from N(0, 0.02) in visiting order, biases zero. */
function bertInit(generator: RandomGenerator, backend: Backend): (m: Module) => Promise<void> {
  return async (m) => {
    if (!(m instanceof Linear)) return;
    const w = randn(m.weight.shape, { generator, backend, std: 0.02 });
    m.weight.write(await w.read());
    w.free();
    m.bias?.write(new Float32Array(m.bias.size));
  };
}

describe('applyFullParams visits in Module.apply order (test_fsdp_apply)', () => {
  for (const world of [2, 4]) {
    it(`an initializer drawing random numbers gives the unwrapped model's weights, world ${world}`, async () => {
      const backend = createCpuBackend();
      const net = new Net(SMALL, backend, 0);
      const init = bertInit(new RandomGenerator(42), backend);
      const order: Module[] = [];
      net.apply((m) => order.push(m));
      for (const m of order) await init(m);
      const expected = new Map<string, number[]>();
      for (const [name, p] of net.namedParameters()) expected.set(name, [...(await p.read())]);
      const results = await onLocalRanks(world, async (group, b) => {
        const model = wrapNet(new Net(SMALL, b, 0), group, {}, true);
        await model.applyFullParams(bertInit(new RandomGenerator(42), b));
        const out = new Map<string, number[]>();
        await model.summonFullParams(async () => {
          for (const [name, p] of model.namedParameters()) out.set(name, [...(await p.read())]);
        });
        return out;
      });
      for (const r of results) expect(r).toEqual(expected);
    });
  }
});
