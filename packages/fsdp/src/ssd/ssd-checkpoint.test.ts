import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalGroups, type ProcessGroup } from '@webshard/collectives';
import { AdamW, type Backend, createCpuBackend, type Tensor } from '@webshard/tensor-core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadShardedCheckpoint, saveShardedCheckpoint } from '../checkpoint/sharded-checkpoint.js';
import type { FullyShardedDataParallel } from '../fully-sharded.js';
import { makeBatches, Net, SMALL, slice } from '../test-support/models.js';
import { wrapNet } from '../test-support/parity.js';
import { NodeFileStore } from './node-file-store.js';
import { stepOffloaded } from './ssd-offload.js';

// [Note: sharded checkpoints of shards in a store]: a checkpoint of a model whose shards and
// optimizer state live in files saves and loads as the in-memory model's does, in both directions.

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fsdp-ssd-checkpoint-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

interface Rank {
  group: ProcessGroup;
  backend: Backend;
  model: FullyShardedDataParallel;
  optimizer: AdamW;
  ssd: boolean;
}

function build(group: ProcessGroup, ssd: boolean, storeDir: string): Rank {
  const backend = createCpuBackend();
  const store = new NodeFileStore(join(storeDir, `rank${group.rank}`));
  const options = ssd ? { ssdOffload: { store } } : {};
  const model = wrapNet(new Net(SMALL, backend, 0), group, options, true);
  const optimizer = new AdamW(model.parameters(), { lr: 0.01 });
  return { group, backend, model, optimizer, ssd };
}

/** `steps` steps from batch `from` on; each rank's losses. */
async function train(rank: Rank, from: number, steps: number): Promise<number[]> {
  const { group, backend, model, optimizer } = rank;
  const losses: number[] = [];
  const half = 8 / group.size;
  for (const batch of makeBatches(backend, SMALL, from + steps, 8).slice(from)) {
    const [x, y] = slice(backend, batch, group.rank * half, (group.rank + 1) * half);
    const loss = (await model.call(x, y)) as Tensor;
    await loss.backward();
    losses.push(await loss.item());
    loss.free();
    if (rank.ssd) await stepOffloaded(model, optimizer);
    else optimizer.step();
    optimizer.zeroGrad();
    x.free();
    y.free();
  }
  return losses;
}

/** On `world` ranks: train 2 steps as `saver`, checkpoint, then 2 more; a fresh `loader` model
 * loads the checkpoint and takes the same 2 steps. Both runs' last losses, by rank. */
async function resumeAcross(world: number, saver: boolean, loader: boolean) {
  const groups = createLocalGroups(world, { timeoutMs: 20_000 });
  const checkpoint = join(dir, 'ckpt');
  return Promise.all(
    groups.map(async (group) => {
      const a = build(group, saver, join(dir, 'a'));
      await train(a, 0, 2);
      await saveShardedCheckpoint(checkpoint, { model: a.model, optimizer: a.optimizer, step: 2 });
      if (saver) {
        // Saved as they were: the shards and state are back in their files.
        for (const u of a.model.units())
          for (const f of u.flatParameters) expect(f.shard.isFreed).toBe(true);
      }
      const unbroken = await train(a, 2, 2);
      const b = build(group, loader, join(dir, 'b'));
      const { step } = await loadShardedCheckpoint(checkpoint, {
        model: b.model,
        optimizer: b.optimizer,
      });
      expect(step).toBe(2);
      if (loader) {
        for (const u of b.model.units()) {
          for (const f of u.flatParameters) {
            expect(f.shard.isFreed).toBe(true);
            const state = b.optimizer.state.get(f.shard)!;
            expect([state.expAvg.isFreed, state.expAvgSq.isFreed]).toEqual([true, true]);
          }
        }
      }
      const resumed = await train(b, 2, 2);
      return { unbroken, resumed };
    }),
  );
}

describe('sharded checkpoints with ssdOffload', () => {
  for (const [saver, loader] of [
    [true, true],
    [true, false],
    [false, true],
  ] as const) {
    for (const world of [1, 2]) {
      it(`${saver ? 'ssdOffload' : 'in memory'} -> ${loader ? 'ssdOffload' : 'in memory'}, world ${world}: resumes bit for bit`, async () => {
        const runs = await resumeAcross(world, saver, loader);
        for (const { unbroken, resumed } of runs) expect(resumed).toEqual(unbroken);
      });
    }
  }
});
