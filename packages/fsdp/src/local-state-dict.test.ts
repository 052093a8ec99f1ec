// fairscale's load_local_state_dict (test_fsdp_state_dict.py, test_load_local_state_dict: a local
// state dict taken after training, loaded into a fresh model, training continues the same), in
// memory, at 2 and 4 local ranks.
import { AdamW, type Backend } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import type { FullyShardedDataParallel } from './fully-sharded.js';
import {
  FsdpStateDictError,
  fullStateDict,
  loadLocalStateDict,
  localStateDict,
} from './state-dict.js';
import { makeBatches, Net, SMALL, slice } from './test-support/models.js';
import { wrapNet } from './test-support/parity.js';
import { onLocalRanks } from './test-support/ranks.js';

async function step(model: ReturnType<typeof wrapNet>, backend: Backend, batchIndex: number) {
  const world = model.options.group.size;
  const rank = model.options.group.rank;
  const rows = 8 / world;
  const batch = makeBatches(backend, SMALL, batchIndex + 1, 8)[batchIndex]!;
  const [x, y] = slice(backend, batch, rank * rows, (rank + 1) * rows);
  const loss = await model.call(x, y);
  const value = await loss.item();
  await loss.backward();
  for (const t of [x, y, loss]) t.free();
  return value;
}

async function full(model: FullyShardedDataParallel): Promise<Map<string, number[]>> {
  const out = new Map<string, number[]>();
  for (const [k, t] of await fullStateDict(model)) out.set(k, [...(await t.read())]);
  return out;
}

describe('loadLocalStateDict', () => {
  for (const world of [2, 4]) {
    it(`a fresh model given the trained one's local state dict has its weights and trains the same, world ${world}`, async () => {
      await onLocalRanks(world, async (group, backend) => {
        const trained = wrapNet(new Net(SMALL, backend, 0), group, {}, true);
        const optimizer = new AdamW(trained.parameters(), { lr: 0.01 });
        for (let i = 0; i < 2; i++) {
          await step(trained, backend, i);
          optimizer.step();
          optimizer.zeroGrad();
        }
        const fresh = wrapNet(new Net(SMALL, backend, 7), group, {}, true);
        expect(await full(fresh)).not.toEqual(await full(trained));
        await loadLocalStateDict(fresh, localStateDict(trained));
        expect(await full(fresh)).toEqual(await full(trained));
        // Same weights, same next loss and gradients (SGD-free check: the losses).
        expect(await step(fresh, backend, 2)).toBe(await step(trained, backend, 2));
      });
    });
  }

  it("refuses another rank's dict, another world size's, another model's, listing every problem, before writing", async () => {
    const fromTwo = await onLocalRanks(2, async (group, backend) =>
      localStateDict(wrapNet(new Net(SMALL, backend, 0), group, {}, true)),
    );
    await onLocalRanks(2, async (group, backend) => {
      const model = wrapNet(new Net(SMALL, backend, 3), group, {}, true);
      const before = await full(model);
      const other = fromTwo[1 - group.rank]!;
      const attempt = loadLocalStateDict(model, other);
      await expect(attempt).rejects.toThrow(FsdpStateDictError);
      await expect(loadLocalStateDict(model, other)).rejects.toThrow(
        `[loadLocalStateDict] the local state dict does not fit rank ${group.rank}: it is rank ${1 - group.rank}'s, this is rank ${group.rank}`,
      );
      expect(await full(model)).toEqual(before);
    });
    await onLocalRanks(4, async (group, backend) => {
      const model = wrapNet(new Net(SMALL, backend, 3), group, {}, true);
      const before = await full(model);
      const given = fromTwo[group.rank % 2]!;
      const message = await loadLocalStateDict(model, { ...given, rank: group.rank }).then(
        () => '',
        (e: Error) => e.message,
      );
      expect(message).toContain("world size 2, the model's 4");
      expect(message).toMatch(/shard flat_param_0 has \d+ elements, the model's \d+/);
      expect(await full(model)).toEqual(before);
    });
    await onLocalRanks(2, async (group, backend) => {
      const model = wrapNet(new Net({ ...SMALL, hidden: 10 }, backend, 3), group, {}, true);
      const message = await loadLocalStateDict(model, fromTwo[group.rank]!).then(
        () => '',
        (e: Error) => e.message,
      );
      expect(message).toMatch(
        /blocks\.0\.flat_param_0 holds blocks\.0\.fc1\.weight\[12,8\]@0 .*, the model.s blocks\.0\.fc1\.weight\[10,8\]@0/,
      );
    });
  });
});
