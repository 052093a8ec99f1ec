// fullStateDict after mixed-precision training returns f32 tensors, buffers included (fairscale's
// test_fsdp_state_dict.py, test_state_dict_device: every value of `state_dict()` is FP32 after
// training with mixed_precision), at 2 and 4 local ranks, against one process without FSDP.
import {
  AdamW,
  type Backend,
  cast,
  createCpuBackend,
  Linear,
  MixedPrecision,
  Module,
  mean,
  mul,
  RandomGenerator,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { onLocalRanks } from './test-support/ranks.js';
import { fullStateDict } from './state-dict.js';

/** Linear(4, 3) scaled by a floating buffer (which mixed precision keeps in the compute dtype). */
class Scaled extends Module<[Tensor], Tensor> {
  readonly layer: Linear;
  constructor(backend: Backend) {
    super();
    this.layer = this.registerModule(
      'layer',
      new Linear(4, 3, { backend, generator: new RandomGenerator(11) }),
    );
    this.registerBuffer('scale', tensor([0.5, 0.25, 2], { backend }));
  }
  forward(x: Tensor): Tensor {
    const scale = this.namedBuffers()[0]![1];
    const h = this.layer.call(x);
    const s = scale.dtype === h.dtype ? scale : cast(scale, h.dtype);
    const out = mul(h, s);
    h.free();
    if (s !== scale) s.free();
    return out;
  }
}

const ROWS = [
  [0.1, -0.2, 0.3, 0.4],
  [0.5, 0.6, -0.7, 0.8],
  [-0.8, 1.0, 0.1, 0.2],
  [0.3, 0.4, 0.5, -0.6],
];

async function step(
  model: { call(x: Tensor): Tensor | Promise<Tensor> },
  x: Tensor,
): Promise<void> {
  const out = await model.call(x);
  const loss = mean(out);
  await loss.backward();
  out.free();
  loss.free();
}

describe('fullStateDict after a mixed-precision step (test_state_dict_device)', () => {
  for (const world of [2, 4]) {
    it(`every tensor is f32, the values those of one process, world ${world}`, async () => {
      const backend = createCpuBackend();
      const net = new Scaled(backend);
      const mp = new MixedPrecision(net, { computeDType: 'f16' });
      const optimizer = new AdamW(mp.masterParams(), { lr: 0.01 });
      for (let i = 0; i < 2; i++) {
        const x = cast(tensor(ROWS, { backend }), 'f16');
        await step(net, x);
        mp.gradsToMasters();
        optimizer.step();
        optimizer.zeroGrad();
        mp.mastersToCompute();
        x.free();
      }
      const reference = new Map<string, number[]>();
      for (const [i, [name]] of net.namedParameters().entries()) {
        reference.set(name, [...(await mp.masterParams()[i]!.read())]);
      }
      reference.set('scale', [0.5, 0.25, 2]);
      const per = ROWS.length / world;
      const dicts = await onLocalRanks(world, async (group, b) => {
        const model = new FullyShardedDataParallel(new Scaled(b), { group, mixedPrecision: true });
        const opt = new AdamW(model.parameters(), { lr: 0.01 });
        for (let i = 0; i < 2; i++) {
          const x = tensor(ROWS.slice(group.rank * per, (group.rank + 1) * per), { backend: b });
          await step(model, x);
          opt.step();
          opt.zeroGrad();
          x.free();
        }
        const dict = await fullStateDict(model);
        const out = new Map<string, { dtype: string; values: number[] }>();
        for (const [k, t] of dict) out.set(k, { dtype: t.dtype, values: [...(await t.read())] });
        return out;
      });
      for (const dict of dicts) {
        expect([...dict.keys()].sort()).toEqual([...reference.keys()].sort());
        for (const [name, expected] of reference) {
          const { dtype, values } = dict.get(name)!;
          expect(dtype, name).toBe('f32');
          for (const [i, v] of values.entries()) {
            expect(Math.abs(v - expected[i]!)).toBeLessThanOrEqual(2e-3);
          }
        }
      }
    });
  }
});
