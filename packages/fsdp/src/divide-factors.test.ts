// fairscale's set_gradient_divide_factors: the factors gradients are divided by before and after
// the reduce-scatter, changed after wrapping, recursively or on one unit.
import { Linear, sum, tensor } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { FsdpConfigError } from './errors.js';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { Net, SMALL } from './test-support/models.js';
import { wrapNet } from './test-support/parity.js';
import { onLocalRanks } from './test-support/ranks.js';

/**
 * Rank 0's shard gradient of w in loss = sum(w * x), x = 30000 on each of 4 ranks, in f16: each
 * rank's gradient fits f16 (max 65504), their sum of 120000 does not.
 */
async function reducedGradient(factors?: [number, number]): Promise<number> {
  const [grad] = await onLocalRanks(4, async (group, backend) => {
    const model = new FullyShardedDataParallel(new Linear(1, 1, { backend, bias: false }), {
      group,
      mixedPrecision: true,
    });
    if (factors) model.setGradientDivideFactors(factors[0], factors[1], true);
    const y = await model.call(tensor([[30000]], { backend }));
    const loss = sum(y);
    await loss.backward();
    return (await model.parameters()[0]!.grad!.read())[0]!;
  });
  return grad!;
}

describe('setGradientDivideFactors', () => {
  it('changes where the f16 sum is divided, world 4: (1, 4) overflows, (4, 1) and the default (2, 2) do not', async () => {
    expect(await reducedGradient()).toBe(30000);
    expect(await reducedGradient([1, 4])).toBe(Number.POSITIVE_INFINITY);
    expect(await reducedGradient([4, 1])).toBe(30000);
  });

  for (const world of [2, 4]) {
    it(`recursive sets every unit, not recursive the unit alone, world ${world}`, async () => {
      await onLocalRanks(world, async (group, backend) => {
        const model = wrapNet(new Net(SMALL, backend), group, {}, true);
        const initial = model.gradientDivideFactors;
        expect(initial).toEqual({ pre: 2, post: world / 2 });
        model.setGradientDivideFactors(1, world, false);
        expect(model.units().map((u) => u.gradientDivideFactors)).toEqual([
          { pre: 1, post: world },
          ...model
            .units()
            .slice(1)
            .map(() => initial),
        ]);
        model.setGradientDivideFactors(world, 1, true);
        for (const u of model.units())
          expect(u.gradientDivideFactors).toEqual({ pre: world, post: 1 });
        expect(() => model.setGradientDivideFactors(0, 1, true)).toThrow(
          new FsdpConfigError('setGradientDivideFactors', 'pre must be a finite number > 0, got 0'),
        );
      });
    });
  }
});
