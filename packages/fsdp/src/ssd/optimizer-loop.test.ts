import { mkdtemp, rm } from 'node:fs/promises';
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
import { FsdpConfigError } from '../errors.js';
import type { FullyShardedDataParallel } from '../fully-sharded.js';
import { expectParity } from '../test-support/expect-parity.js';
import { makeBatches, Net, SMALL, slice } from '../test-support/models.js';
import { type ParityResult, trainLocal, trainSingle, wrapNet } from '../test-support/parity.js';
import { NodeFileStore } from './node-file-store.js';
import type { ShardStore, SsdOffloadOptions } from './shard-store.js';
import { ssdStats, stepOffloaded } from './ssd-offload.js';

// [Note: the optimizer's own step through a store]: fairscale's loop, unchanged, under ssdOffload:
// loss.backward(); optimizer.step(); optimizer.zeroGrad(), and optimizer.stateDict() / loadStateDict.

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fsdp-ssd-loop-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const STEPS = 4;
const ADAM = { lr: 0.01, weightDecay: 0.01 };

interface Rank {
  backend: Backend;
  model: FullyShardedDataParallel;
  optimizer: AdamW;
}

function build(group: ProcessGroup, nested: boolean, ssd: SsdOffloadOptions | null): Rank {
  const backend = createCpuBackend();
  const model = wrapNet(
    new Net(SMALL, backend, 0),
    group,
    ssd ? { ssdOffload: ssd } : {},
    nested,
  ) as FullyShardedDataParallel;
  return { backend, model, optimizer: new AdamW(model.parameters(), ADAM) };
}

/** A state dict's tensors as arrays, to compare with `toEqual`. */
async function values(dict: OptimizerStateDict): Promise<unknown> {
  const state: Record<string, Record<string, unknown>> = {};
  for (const [i, s] of Object.entries(dict.state)) {
    state[i] = {};
    for (const [key, v] of Object.entries(s)) {
      state[i]![key] = v instanceof Tensor ? [...((await v.read()) as Float32Array)] : v;
    }
  }
  return { state, param_groups: dict.param_groups };
}

/**
 * One rank's plain loop, the same on both models: each step forward, backward, `optimizer.step()`,
 * `zeroGrad()`; after step 2 `stateDict()`, whose values it returns, loaded back with
 * `loadStateDict`. Its losses and final parameters.
 */
async function plainLoop(
  group: ProcessGroup,
  rank: Rank,
  onStep: (step: number) => void,
): Promise<ParityResult & { dict: unknown }> {
  const { backend, model, optimizer } = rank;
  const rows = 8 / group.size;
  const losses: number[] = [];
  let dict: unknown = null;
  let step = 0;
  for (const batch of makeBatches(backend, SMALL, STEPS, 8)) {
    const [x, y] = slice(backend, batch, group.rank * rows, (group.rank + 1) * rows);
    const loss = (await model.call(x, y)) as Tensor;
    losses.push(await loss.item());
    await loss.backward();
    optimizer.step();
    optimizer.zeroGrad();
    onStep(step++);
    if (step === 2) {
      const own = optimizer.stateDict();
      dict = await values(own);
      await optimizer.loadStateDict(own);
    }
    for (const t of [x, y, loss]) t.free();
  }
  const params = new Map<string, Float32Array>();
  await model.summonFullParams(async () => {
    for (const [name, p] of model.namedParameters())
      params.set(name, (await p.read()) as Float32Array);
  });
  return { losses, params, dict };
}

describe("ssdOffload under fairscale's unchanged loop: optimizer.step() and stateDict()", () => {
  for (const nested of [false, true]) {
    for (const offloadGradients of [false, true]) {
      it(`world 2, ${nested ? 'nested' : 'flat'}${offloadGradients ? ', offloadGradients' : ''}: bit for bit with in-memory FSDP, within 1e-5 of one process`, async () => {
        const groups = createLocalGroups(2, { timeoutMs: 20_000 });
        const results = await Promise.all(
          groups.map(async (group) => {
            const memory = build(group, nested, null);
            const store = new NodeFileStore(join(dir, `rank${group.rank}`));
            const offloaded = build(group, nested, { store, offloadGradients });
            const inMemory = await plainLoop(group, memory, () => {});
            const onFiles = await plainLoop(group, offloaded, () => {
              // Between steps every shard and its Adam state are in their files, not in memory.
              for (const unit of offloaded.model.units()) {
                for (const f of unit.flatParameters) {
                  expect(f.shard.isFreed).toBe(true);
                  const s = offloaded.optimizer.state.get(f.shard)!;
                  expect([s.expAvg.isFreed, s.expAvgSq.isFreed]).toEqual([true, true]);
                }
              }
            });
            expect(ssdStats(offloaded.model).bytesWritten).toBeGreaterThan(0);
            return { inMemory, onFiles };
          }),
        );
        await Promise.all(groups.map((g) => g.close()));
        for (const { inMemory, onFiles } of results) {
          expect(onFiles.losses).toEqual(inMemory.losses);
          expect(onFiles.dict).toEqual(inMemory.dict);
          expect(onFiles.params).toEqual(inMemory.params);
        }
        const reference = await trainSingle({ steps: STEPS, batch: 8 });
        expectParity(
          results.map((r) => r.onFiles),
          reference,
          1e-5,
        );
      });
    }
  }

  it('a store without synchronous reads is a FsdpConfigError naming stepOffloaded; stepOffloaded trains', async () => {
    const [group] = createLocalGroups(1);
    const files = new NodeFileStore(dir);
    // The asynchronous half of the contract only, as OpfsStore has.
    const store: ShardStore = {
      kind: 'async-only',
      write: (key, bytes) => files.write(key, bytes),
      read: (key, into) => files.read(key, into),
      remove: (key) => files.remove(key),
      stats: () => files.stats(),
      resetStats: () => files.resetStats(),
    };
    const rank = build(group!, true, { store });
    const [batch] = makeBatches(rank.backend, SMALL, 1, 8);
    const [x, y] = slice(rank.backend, batch!, 0, 8);
    const loss = (await rank.model.call(x, y)) as Tensor;
    await loss.backward();
    expect(() => rank.optimizer.step()).toThrow(
      new FsdpConfigError(
        'optimizer.step',
        'the async-only store has no synchronous reads: call await stepOffloaded(model, optimizer) for the step and await localOptimStateDict(model, optimizer) for the state dict',
      ),
    );
    await stepOffloaded(rank.model, rank.optimizer);
    rank.optimizer.zeroGrad();
    expect(rank.optimizer.state.get(rank.model.flatParameters[0]!.shard)!.step).toBe(1);
    await group!.close();
  });

  it('trains as stepOffloaded does, moving the same bytes', async () => {
    const run = { steps: 3, batch: 8, nested: true };
    const plainStore = new NodeFileStore(join(dir, 'plain'));
    const asyncStore = new NodeFileStore(join(dir, 'async'));
    const plain = await trainLocal(2, run, { ssdOffload: { store: plainStore } });
    const stepped = await trainLocal(
      2,
      { ...run, stepOffloaded: true },
      { ssdOffload: { store: asyncStore } },
    );
    expect(plain).toEqual(stepped);
    expect(plainStore.stats()).toEqual(asyncStore.stats());
  });
});
