// fairscale's get_shard_from_optim_state_dict (a full optimizer state cut to this rank's shard, in
// memory) and gather_full_optim_state_dict's recipient_rank, at 2 and 4 local ranks.
import { AdamW, type Tensor } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { FsdpConfigError } from './errors.js';
import type { FullyShardedDataParallel } from './fully-sharded.js';
import { shardedLayout } from './layout.js';
import {
  type FullOptimStateDict,
  gatherFullOptimStateDict,
  getShardFromOptimStateDict,
} from './optim-state.js';
import { makeBatches, Net, SMALL, slice } from './test-support/models.js';
import { wrapNet } from './test-support/parity.js';
import { onLocalRanks, recordOps } from './test-support/ranks.js';

async function trained(
  group: Parameters<Parameters<typeof onLocalRanks>[1]>[0],
  backend: Parameters<Parameters<typeof onLocalRanks>[1]>[1],
): Promise<{ model: FullyShardedDataParallel; optimizer: AdamW }> {
  const model = wrapNet(new Net(SMALL, backend, 0), group, {}, true);
  const optimizer = new AdamW(model.parameters(), { lr: 0.01 });
  const rows = 8 / group.size;
  for (const batch of makeBatches(backend, SMALL, 2, 8)) {
    const [x, y] = slice(backend, batch, group.rank * rows, (group.rank + 1) * rows);
    const loss = await model.call(x, y);
    await loss.backward();
    optimizer.step();
    optimizer.zeroGrad();
    for (const t of [x, y, loss]) t.free();
  }
  return { model, optimizer };
}

/** The full state's `key` for every entry of flat parameter `i`, laid out flat and padded. */
async function flatOf(
  model: FullyShardedDataParallel,
  full: FullOptimStateDict,
  i: number,
  key: string,
): Promise<Float32Array> {
  const fl = shardedLayout(model).flatParams[i]!;
  const out = new Float32Array(fl.paddedNumel);
  for (const e of fl.entries) {
    out.set((await (full.state[e.names[0]!]![key] as Tensor).read()) as Float32Array, e.offset);
  }
  return out;
}

describe('getShardFromOptimStateDict', () => {
  for (const world of [2, 4]) {
    it(`cuts the full state to this rank's slice of every flat parameter, without a collective, world ${world}`, async () => {
      await onLocalRanks(world, async (group, backend) => {
        const { model, optimizer } = await trained(group, backend);
        const full = (await gatherFullOptimStateDict(model, optimizer, { rank0Only: false }))!;
        const own = optimizer.stateDict();
        const ops: string[] = [];
        recordOps(group, ops);
        const shard = await getShardFromOptimStateDict(model, optimizer, full);
        expect(ops).toEqual([]);
        expect(Object.keys(shard.state)).toEqual(Object.keys(own.state));
        expect(shard.param_groups.map((g) => g.params)).toEqual(
          own.param_groups.map((g) => g.params),
        );
        const flats = model.units().flatMap((u) => u.flatParameters);
        for (const [index, state] of Object.entries(shard.state)) {
          const i = Number(index);
          expect(state.step).toBe(2);
          for (const key of ['exp_avg', 'exp_avg_sq']) {
            const n = flats[i]!.shardNumel;
            const expected = (await flatOf(model, full, i, key)).subarray(
              group.rank * n,
              (group.rank + 1) * n,
            );
            const got = (await (state[key] as Tensor).read()) as Float32Array;
            expect([...got]).toEqual([...expected]);
            // The optimizer's own state, which the full one was gathered from.
            expect([...got]).toEqual([
              ...((await (own.state[i]![key] as Tensor).read()) as Float32Array),
            ]);
            (state[key] as Tensor).free();
          }
        }
      });
    });
  }
});

describe('gatherFullOptimStateDict recipientRank', () => {
  it('only the recipient gets the state, the same as every rank gets without rank0Only, world 4', async () => {
    const results = await onLocalRanks(4, async (group, backend) => {
      const { model, optimizer } = await trained(group, backend);
      const toTwo = await gatherFullOptimStateDict(model, optimizer, { recipientRank: 2 });
      const all = (await gatherFullOptimStateDict(model, optimizer, { rank0Only: false }))!;
      const ops: string[] = [];
      recordOps(group, ops);
      await expect(
        gatherFullOptimStateDict(model, optimizer, { recipientRank: 4 }),
      ).rejects.toThrow(
        new FsdpConfigError(
          'gatherFullOptimStateDict',
          `recipientRank must be an integer in [0, 4), got 4 (rank ${group.rank})`,
        ),
      );
      expect(ops).toEqual([]);
      if (toTwo === null) return null;
      const same: boolean[] = [];
      for (const [name, s] of Object.entries(all.state)) {
        const t = toTwo.state[name]!.exp_avg as Tensor;
        same.push(
          JSON.stringify([...(await t.read())]) ===
            JSON.stringify([...(await (s.exp_avg as Tensor).read())]),
        );
      }
      return same;
    });
    expect(results.map((r) => r === null)).toEqual([true, true, false, true]);
    expect(results[2]!.every(Boolean)).toBe(true);
  });
});
