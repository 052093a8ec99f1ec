import { mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalGroups, type ProcessGroup } from '@webshard/collectives';
import {
  AdamW,
  type Backend,
  createCpuBackend,
  type OptimizerStateDict,
  Tensor,
} from '@webshard/tensor-core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FullyShardedDataParallel } from '../fully-sharded.js';
import {
  type FullOptimStateDict,
  gatherFullOptimStateDict,
  loadFullOptimStateDict,
  loadLocalOptimStateDict,
  localOptimStateDict,
} from '../optim-state.js';
import { makeBatches, Net, SMALL, slice } from '../test-support/models.js';
import { wrapNet } from '../test-support/parity.js';
import { NodeFileStore } from './node-file-store.js';
import { stepOffloaded } from './ssd-offload.js';

// [Note: optimizer state in a store]: the optimizer state dicts of a model whose Adam state lives
// in files are the in-memory model's, bit for bit, and load into it so training goes on as in memory.

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fsdp-ssd-optim-'));
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

function build(group: ProcessGroup, ssd: boolean, name: string): Rank {
  const backend = createCpuBackend();
  const store = new NodeFileStore(join(dir, name, `rank${group.rank}`));
  const model = wrapNet(
    new Net(SMALL, backend, 0),
    group,
    ssd ? { ssdOffload: { store } } : {},
    true,
  );
  return { group, backend, model, optimizer: new AdamW(model.parameters(), { lr: 0.01 }), ssd };
}

/** `steps` steps from batch `from` on; the losses. */
async function train(rank: Rank, from: number, steps: number): Promise<number[]> {
  const { group, backend, model, optimizer } = rank;
  const losses: number[] = [];
  const rows = 8 / group.size;
  for (const batch of makeBatches(backend, SMALL, from + steps, 8).slice(from)) {
    const [x, y] = slice(backend, batch, group.rank * rows, (group.rank + 1) * rows);
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

/** A state dict's tensors as arrays, to compare with `toEqual`. */
async function values(dict: OptimizerStateDict | FullOptimStateDict): Promise<unknown> {
  const state: Record<string, Record<string, unknown>> = {};
  for (const [i, s] of Object.entries(dict.state)) {
    state[i] = {};
    for (const [key, v] of Object.entries(s)) {
      state[i]![key] = v instanceof Tensor ? [...((await v.read()) as Float32Array)] : v;
    }
  }
  return { state, param_groups: dict.param_groups };
}

function expectStateFreed(rank: Rank): void {
  for (const u of rank.model.units()) {
    for (const f of u.flatParameters) {
      const s = rank.optimizer.state.get(f.shard)!;
      expect([s.expAvg.isFreed, s.expAvgSq.isFreed]).toEqual([true, true]);
    }
  }
}

async function onRanks<R>(world: number, fn: (group: ProcessGroup) => Promise<R>): Promise<R[]> {
  const groups = createLocalGroups(world, { timeoutMs: 20_000 });
  try {
    return await Promise.all(groups.map(fn));
  } finally {
    await Promise.all(groups.map((g) => g.close()));
  }
}

describe('optimizer state dicts under ssdOffload', () => {
  for (const world of [1, 2]) {
    it(`world ${world}: localOptimStateDict and gatherFullOptimStateDict equal the in-memory model's bit for bit`, async () => {
      await onRanks(world, async (group) => {
        const memory = build(group, false, 'memory');
        const offloaded = build(group, true, 'ssd');
        expect(await train(offloaded, 0, 2)).toEqual(await train(memory, 0, 2));
        // The optimizer's own state dict reads the state in from the store
        // ([Note: the optimizer's own step through a store]); the helpers free it again.
        expect(await values(offloaded.optimizer.stateDict())).toEqual(
          await values(memory.optimizer.stateDict()),
        );

        const local = await localOptimStateDict(offloaded.model, offloaded.optimizer);
        expect(await values(local)).toEqual(await values(memory.optimizer.stateDict()));
        expect(await values(await localOptimStateDict(memory.model, memory.optimizer))).toEqual(
          await values(local),
        );
        expectStateFreed(offloaded);

        const options = { rank0Only: false };
        const full = (await gatherFullOptimStateDict(
          offloaded.model,
          offloaded.optimizer,
          options,
        ))!;
        const reference = (await gatherFullOptimStateDict(
          memory.model,
          memory.optimizer,
          options,
        ))!;
        expect(await values(full)).toEqual(await values(reference));
        expectStateFreed(offloaded);
        // Reading the state changed nothing: training goes on as in memory.
        expect(await train(offloaded, 2, 2)).toEqual(await train(memory, 2, 2));
      });
    });

    it(`world ${world}: loadLocalOptimStateDict, loadFullOptimStateDict and optimizer.loadStateDict load the in-memory model's state, training goes on bit for bit`, async () => {
      await onRanks(world, async (group) => {
        const memory = build(group, false, 'memory');
        await train(memory, 0, 2);
        // Copies: the optimizer's own tensors change in place as memory trains on.
        const local = await localOptimStateDict(memory.model, memory.optimizer);
        const full = (await gatherFullOptimStateDict(memory.model, memory.optimizer, {
          rank0Only: false,
        }))!;
        const unbroken = await train(memory, 2, 2);
        const loads: [string, (r: Rank) => Promise<void>][] = [
          ['loadLocalOptimStateDict', (r) => loadLocalOptimStateDict(r.model, r.optimizer, local)],
          ['loadFullOptimStateDict', (r) => loadFullOptimStateDict(r.model, r.optimizer, full)],
          [
            // The loaded state stays in memory; a state dict read meanwhile writes it to the store.
            'optimizer.loadStateDict, then localOptimStateDict',
            async (r) => {
              await r.optimizer.loadStateDict(local);
              const read = await localOptimStateDict(r.model, r.optimizer);
              expect(await values(read)).toEqual(await values(local));
            },
          ],
        ];
        for (const [i, [title, load]] of loads.entries()) {
          // The same weights as memory's after 2 steps, then a fresh optimizer that loads the state.
          const offloaded = build(group, true, `ssd${i}`);
          await train(offloaded, 0, 2);
          // Its files hold memory's state too: zero them, so only a load that writes through counts.
          const files = join(dir, `ssd${i}`, `rank${group.rank}`);
          for (const name of await readdir(files)) {
            if (!/\.expAvg(Sq)?\.shard$/.test(name)) continue;
            const { size } = await stat(join(files, name));
            await writeFile(join(files, name), new Uint8Array(size));
          }
          offloaded.optimizer = new AdamW(offloaded.model.parameters(), { lr: 0.01 });
          await load(offloaded);
          if (i < 2) expectStateFreed(offloaded);
          expect(await train(offloaded, 2, 2), title).toEqual(unbroken);
        }
      });
    });
  }
});
