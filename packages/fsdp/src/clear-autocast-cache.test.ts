// fairscale's `clear_autocast_cache`: FSDP's forward ends with `torch.clear_autocast_cache()` when
// it is set, because inside one autocast scope the cache keeps a parameter's first cast while the
// unit gathers new values into the same parameter. Two forwards in one scope, the shards written
// in between: without the option the second forward computes with the stale cast; with it, with
// the new values.
import {
  autocast,
  copy_,
  Linear,
  noGrad,
  RandomGenerator,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { onLocalRanks } from './test-support/ranks.js';

async function values(t: Tensor): Promise<number[]> {
  return [...(await t.read())];
}

describe('clearAutocastCache (fairscale clear_autocast_cache)', () => {
  for (const clearAutocastCache of [false, true]) {
    it(`${clearAutocastCache ? 'casts the new values' : 'keeps the stale cast (the default)'} after the shards change inside one scope, 2 ranks`, async () => {
      const results = await onLocalRanks(2, async (group, backend) => {
        const net = new Linear(4, 3, { backend, generator: new RandomGenerator(0) });
        const model = new FullyShardedDataParallel(net, {
          group,
          clearAutocastCache,
          // The root gathers again for the second forward instead of keeping its full parameters.
          disableReshardOnRoot: false,
        });
        const x = tensor([[1, 2, 3, 4]], { backend });
        return autocast({ dtype: 'bf16' }, async () => {
          const first = await values((await model.call(x)) as Tensor);
          // Every shard zeroed in place, as an optimizer step writes them.
          noGrad(() => {
            for (const shard of model.parameters()) {
              copy_(shard, tensor([...new Array<number>(shard.size)].fill(0), { backend }));
            }
          });
          const second = await values((await model.call(x)) as Tensor);
          return { first, second };
        });
      });
      for (const { first, second } of results) {
        if (clearAutocastCache) {
          // The zeroed weight and bias give zeros.
          expect(second).toEqual([0, 0, 0]);
          expect(first).not.toEqual(second);
        } else {
          expect(second).toEqual(first);
        }
      }
    });
  }
});
