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

// [Note: reading ahead from a store]: with readAhead, where FSDP prefetches a gather, a unit with
// ssdOffload has its shard read from the store while the unit before it computes; same values.

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

/** One rank, nested units, 2 steps: the second forward's log of reads and units computing. */
async function secondForward(readAhead: boolean, limitAllGathers = 1): Promise<string[]> {
  const [group] = createLocalGroups(1);
  const backend = createCpuBackend();
  const log: string[] = [];
  const store = new LoggingStore(join(dir, `${readAhead}-${limitAllGathers}`), log);
  const model = wrapNet(
    new Net(SMALL, backend, 0),
    group!,
    { limitAllGathers, ssdOffload: { store, readAhead } },
    true,
  );
  const units = model.units().slice(1);
  for (const unit of units) {
    const call = unit.module.call.bind(unit.module);
    unit.module.call = (...args) => {
      log.push(`compute ${unit.unitName}`);
      return call(...args);
    };
  }
  const optimizer = new AdamW(model.parameters(), { lr: 0.01 });
  let forward: string[] = [];
  for (const batch of makeBatches(backend, SMALL, 2, 8)) {
    const [x, y] = slice(backend, batch, 0, 8);
    log.length = 0;
    const loss = await model.call(x, y);
    forward = [...log];
    await loss.backward();
    await stepOffloaded(model, optimizer);
    optimizer.zeroGrad();
    for (const t of [x, y, loss]) t.free();
  }
  await group!.close();
  // Keys carry a serial per model (ssd<n>.): leave it out to compare two models' logs.
  return forward.map((e) => e.replace(/^read ssd\d+\./, 'read '));
}

/** For each `compute` in `log`, how many reads started before it. */
function readsBeforeEachCompute(log: string[]): number[] {
  const counts: number[] = [];
  let reads = 0;
  for (const e of log) {
    if (e.startsWith('read ')) reads++;
    else counts.push(reads);
  }
  return counts;
}

describe('ssdOffload.readAhead reads the next unit ahead', () => {
  it("readAhead: starts the next unit's read before the current unit computes; not by default, nor with limitAllGathers 0", async () => {
    const ahead = await secondForward(true);
    const plain = await secondForward(false);
    expect(await secondForward(true, 0)).toEqual(plain);
    // Reads started before each block computes: the root's and the blocks' up to it, and with
    // read-ahead the next block's too (the last block has none after it).
    expect(readsBeforeEachCompute(plain)).toEqual([2, 3, 4]);
    expect(readsBeforeEachCompute(ahead)).toEqual([3, 4, 4]);
    // The same reads in both, in another order.
    expect(ahead.filter((e) => e.startsWith('read ')).length).toBe(4);
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
