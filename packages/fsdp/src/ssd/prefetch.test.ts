import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalGroups } from '@webshard/collectives';
import { AdamW, createCpuBackend } from '@webshard/tensor-core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { makeBatches, Net, SMALL, slice } from '../test-support/models.js';
import { trainLocal, wrapNet } from '../test-support/parity.js';
import { NodeFileStore } from './node-file-store.js';
import { stepOffloaded } from './ssd-offload.js';

// [Note: prefetching shards from a store]: a unit with ssdOffload is gathered ahead where an
// in-memory unit is (its shard read in first), and with readAhead the shard of the unit after it is
// read in the background too; the same values either way.

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fsdp-ssd-ahead-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A store that logs each read's key as it starts. */
class LoggingStore extends NodeFileStore {
  constructor(
    path: string,
    private readonly log: string[],
  ) {
    super(path);
  }

  override async read(key: string, into: Uint8Array): Promise<void> {
    this.log.push(`read ${key}`);
    await super.read(key, into);
  }
}

/**
 * Nested units on `world` ranks, 2 steps: rank 0's second forward as a log of reads from the store,
 * gathers issued (`gather <unit>`) and blocks computing. `ssd` null: in memory.
 */
async function secondForward(
  world: number,
  ssd: { readAhead: boolean } | null,
  limitAllGathers = 1,
): Promise<string[]> {
  const groups = createLocalGroups(world, { timeoutMs: 20_000 });
  const logs = await Promise.all(
    groups.map(async (group) => {
      const backend = createCpuBackend();
      const log: string[] = [];
      const path = join(dir, `${group.rank}-${ssd?.readAhead}-${limitAllGathers}`);
      const ssdOffload = ssd ? { store: new LoggingStore(path, log), ...ssd } : undefined;
      const model = wrapNet(
        new Net(SMALL, backend, 0),
        group,
        { limitAllGathers, ...(ssdOffload ? { ssdOffload } : {}) },
        true,
      );
      for (const unit of model.units()) {
        const params = unit.paramGroup;
        const unshard = params.unshard.bind(params);
        params.unshard = () => {
          if (params.isSharded) log.push(`gather ${unit.unitName}`);
          unshard();
        };
        if (unit === model) continue;
        const call = unit.module.call.bind(unit.module);
        unit.module.call = (...args) => {
          log.push(`compute ${unit.unitName}`);
          return call(...args);
        };
      }
      const optimizer = new AdamW(model.parameters(), { lr: 0.01 });
      let forward: string[] = [];
      const rows = 8 / world;
      for (const batch of makeBatches(backend, SMALL, 2, 8)) {
        const [x, y] = slice(backend, batch, group.rank * rows, (group.rank + 1) * rows);
        log.length = 0;
        const loss = await model.call(x, y);
        forward = [...log];
        await loss.backward();
        // stepOffloaded, so this test runs on code whose optimizer.step() refuses shards in files.
        if (ssd) await stepOffloaded(model, optimizer);
        else optimizer.step();
        optimizer.zeroGrad();
        for (const t of [x, y, loss]) t.free();
      }
      return forward;
    }),
  );
  await Promise.all(groups.map((g) => g.close()));
  // Keys carry a serial per model (ssd<n>.): leave it out to compare two models' logs.
  return logs[0]!.map((e) => e.replace(/^read ssd\d+\./, 'read '));
}

/** For each `compute` in `log`, how many entries of `kind` came before it. */
function beforeEachCompute(log: string[], kind: 'read' | 'gather'): number[] {
  const counts: number[] = [];
  let n = 0;
  for (const e of log) {
    if (e.startsWith(`${kind} `)) n++;
    else if (e.startsWith('compute ')) counts.push(n);
  }
  return counts;
}

const without = (log: string[], kind: string) => log.filter((e) => !e.startsWith(`${kind} `));

describe('ssdOffload: units are prefetched as in memory', () => {
  it("world 2: the next unit's shard is read and its gather issued before the current unit computes, in in-memory FSDP's order", async () => {
    const memory = await secondForward(2, null);
    const plain = await secondForward(2, { readAhead: false });
    // Gathers and computes interleave exactly as in memory: each block's gather is issued before
    // the block ahead of it computes (the root's, then blocks 0 and 1 before block 0 computes).
    expect(without(plain, 'read')).toEqual(memory);
    expect(beforeEachCompute(memory, 'gather')).toEqual([3, 4, 4]);
    // Each gather's shard was read first: the root's and the blocks' up to the next one.
    expect(beforeEachCompute(plain, 'read')).toEqual([3, 4, 4]);
  });

  it('limitAllGathers 0: nothing is read or gathered ahead', async () => {
    const log = await secondForward(1, { readAhead: false }, 0);
    expect(beforeEachCompute(log, 'read')).toEqual([2, 3, 4]);
    expect(beforeEachCompute(log, 'gather')).toEqual([2, 3, 4]);
  });

  it('readAhead: the shard of the unit after the prefetched one is read too, the same reads in all', async () => {
    const plain = await secondForward(1, { readAhead: false });
    const ahead = await secondForward(1, { readAhead: true });
    expect(beforeEachCompute(ahead, 'read')).toEqual([4, 4, 4]);
    expect(beforeEachCompute(ahead, 'gather')).toEqual([3, 4, 4]);
    expect([...ahead].sort()).toEqual([...plain].sort());
  });

  for (const world of [1, 2]) {
    it(`world ${world}: trains bit for bit with read-ahead and without`, async () => {
      const run = { steps: 3, batch: 8, nested: true };
      const inMemory = await trainLocal(world, run);
      const ahead = await trainLocal(world, run, {
        ssdOffload: { store: new NodeFileStore(join(dir, 'a')), readAhead: true },
      });
      const plain = await trainLocal(world, run, {
        ssdOffload: { store: new NodeFileStore(join(dir, 'b')) },
      });
      expect(ahead).toEqual(inMemory);
      expect(plain).toEqual(inMemory);
    });
  }
});
