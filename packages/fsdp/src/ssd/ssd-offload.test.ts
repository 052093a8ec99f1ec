import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalGroups } from '@webshard/collectives';
import { AdamW, createCpuBackend } from '@webshard/tensor-core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FsdpConfigError } from '../errors.js';
import { makeBatches, Net, SMALL, slice } from '../test-support/models.js';
import { trainLocal, wrapNet } from '../test-support/parity.js';
import { NodeFileStore } from './node-file-store.js';
import { ssdStats, stepOffloaded } from './ssd-offload.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fsdp-ssd-offload-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const RUN = { steps: 3, batch: 8 };

describe('ssdOffload: shards and optimizer state in files train as in memory', () => {
  for (const world of [1, 2, 4]) {
    for (const nested of [false, true]) {
      it(`world ${world}, ${nested ? 'nested' : 'flat'}: bit for bit`, async () => {
        const inMemory = await trainLocal(world, { ...RUN, nested });
        const store = new NodeFileStore(dir);
        const offloaded = await trainLocal(world, { ...RUN, nested }, { ssdOffload: { store } });
        for (let r = 0; r < world; r++) {
          expect(offloaded[r]!.losses).toEqual(inMemory[r]!.losses);
          expect([...offloaded[r]!.params.keys()]).toEqual([...inMemory[r]!.params.keys()]);
          for (const [name, values] of inMemory[r]!.params) {
            expect(offloaded[r]!.params.get(name), name).toEqual(values);
          }
        }
        const { bytesRead, bytesWritten } = store.stats();
        expect(bytesRead).toBeGreaterThan(0);
        expect(bytesWritten).toBeGreaterThan(0);
      });
    }
  }
});

describe('ssdOffload with other options trains as in memory', () => {
  const cases: [string, Record<string, unknown>, number?][] = [
    ['noSync accumulation over 2 micro-batches', {}, 2],
    ['mixed precision (f16)', { mixedPrecision: true, computeDtype: 'f16' }],
    ['reshardAfterForward: false', { reshardAfterForward: false }],
    ['flattenParameters: false', { flattenParameters: false }],
  ];
  for (const [title, options, accumulate] of cases) {
    it(`${title}, world 2, nested: bit for bit`, async () => {
      const run = { ...RUN, nested: true, accumulate };
      const inMemory = await trainLocal(2, run, options);
      const store = new NodeFileStore(dir);
      const offloaded = await trainLocal(2, run, { ...options, ssdOffload: { store } });
      for (let r = 0; r < 2; r++) {
        expect(offloaded[r]!.losses).toEqual(inMemory[r]!.losses);
        expect(offloaded[r]!.params).toEqual(inMemory[r]!.params);
      }
    });
  }
});

describe('ssdOffload: what lives where, and the bytes a step moves', () => {
  it('frees shards and optimizer state between uses; reads and writes the bytes the note says', async () => {
    const world = 2;
    const groups = createLocalGroups(world, { timeoutMs: 20_000 });
    const perStep = await Promise.all(
      groups.map(async (group) => {
        const backend = createCpuBackend();
        const store = new NodeFileStore(join(dir, `rank${group.rank}`));
        const model = wrapNet(new Net(SMALL, backend, 0), group, { ssdOffload: { store } }, true);
        const optimizer = new AdamW(model.parameters(), { lr: 0.01 });
        const shardBytes = (u: (typeof units)[number]) =>
          u.flatParameters.reduce((n, f) => n + f.shardNumel * 4, 0);
        const units = model.units();
        const all = units.reduce((n, u) => n + shardBytes(u), 0);
        const root = shardBytes(units[0]!);
        const stats = [];
        for (const batch of makeBatches(backend, SMALL, 3, 8)) {
          const [x, y] = slice(backend, batch, group.rank * 4, group.rank * 4 + 4);
          store.resetStats();
          const loss = await model.call(x, y);
          await loss.backward();
          loss.free();
          await stepOffloaded(model, optimizer);
          optimizer.zeroGrad();
          stats.push(ssdStats(model));
          for (const u of units) {
            for (const f of u.flatParameters) {
              expect(f.shard.isFreed).toBe(true);
              const state = optimizer.state.get(f.shard)!;
              expect([state.expAvg.isFreed, state.expAvgSq.isFreed]).toEqual([true, true]);
            }
          }
          x.free();
          y.free();
        }
        // Nested units read their shard for forward, for backward and for the step; the root keeps
        // its full parameters from forward to backward (disableReshardOnRoot), so reads twice.
        const shardReads = 3 * all - root;
        // The first forward finds the shards still in memory from wrapping, and writes them.
        expect(stats[0]).toEqual({
          bytesRead: shardReads - all,
          bytesWritten: all + 3 * all, // the first release writes each shard; the step, shard and state
          reads: 3 * 4 - 1 - 4,
          writes: 4 + 3 * 4,
        });
        for (const s of stats.slice(1)) {
          expect(s).toEqual({
            bytesRead: shardReads + 2 * all,
            bytesWritten: 3 * all,
            reads: 3 * 4 - 1 + 2 * 4,
            writes: 3 * 4,
          });
        }
        // The optimizer's own step reads the shards from their files and writes them back, as
        // stepOffloaded does ([Note: the optimizer's own step through a store]).
        const x = slice(backend, makeBatches(backend, SMALL, 1, 8)[0]!, 0, 4);
        const loss = await model.call(x[0], x[1]);
        await loss.backward();
        store.resetStats();
        optimizer.step();
        expect(ssdStats(model)).toEqual({
          bytesRead: 3 * all,
          bytesWritten: 3 * all,
          reads: 3 * 4,
          writes: 3 * 4,
        });
        for (const u of units) for (const f of u.flatParameters) expect(f.shard.isFreed).toBe(true);
        return stats;
      }),
    );
    expect(perStep[0]).toEqual(perStep[1]);
    await Promise.all(groups.map((g) => g.close()));
  });

  it('is a FsdpConfigError without a store, and stepOffloaded needs it on every unit', async () => {
    const [group] = createLocalGroups(1);
    const net = () => new Net(SMALL, createCpuBackend(), 0);
    expect(() => wrapNet(net(), group!, { ssdOffload: {} as never }, false)).toThrow(
      new FsdpConfigError(
        'FullyShardedDataParallel',
        'ssdOffload needs { store }, a ShardStore such as NodeFileStore or OpfsStore',
      ),
    );
    const plain = wrapNet(net(), group!, {}, false);
    await expect(stepOffloaded(plain, new AdamW(plain.parameters()))).rejects.toThrow(
      "[stepOffloaded] unit '<root>' was not wrapped with ssdOffload: step it with optimizer.step()",
    );
    await group!.close();
  });
});
