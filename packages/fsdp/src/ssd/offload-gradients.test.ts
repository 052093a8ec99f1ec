import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalGroups } from '@webshard/collectives';
import { AdamW, createCpuBackend } from '@webshard/tensor-core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { makeBatches, Net, SMALL, slice } from '../test-support/models.js';
import { type ParityResult, trainLocal, wrapNet } from '../test-support/parity.js';
import { NodeFileStore } from './node-file-store.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fsdp-ssd-grads-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const RUN = { steps: 3, batch: 8, nested: true };

function expectSame(a: ParityResult[], b: ParityResult[]): void {
  for (let r = 0; r < a.length; r++) {
    expect(a[r]!.losses).toEqual(b[r]!.losses);
    expect(a[r]!.params).toEqual(b[r]!.params);
  }
}

describe('ssdOffload.offloadGradients: gradients in the store train as in memory', () => {
  const cases: [string, Partial<typeof RUN> & { accumulate?: number; clip?: number }][] = [
    ['plain steps', {}],
    ['2 micro-batches under noSync', { accumulate: 2 }],
    ['clipped to a global norm of 0.05 (every step clips)', { clip: 0.05 }],
  ];
  for (const world of [1, 2]) {
    for (const [title, extra] of cases) {
      it(`world ${world}, ${title}: bit for bit`, async () => {
        const run = { ...RUN, ...extra };
        const inMemory = await trainLocal(world, run);
        const store = new NodeFileStore(dir);
        const offloaded = await trainLocal(world, run, {
          ssdOffload: { store, offloadGradients: true },
        });
        expectSame(offloaded, inMemory);
        // The gradients went through the store: more bytes than the shards and state alone.
        const shardsOnly = new NodeFileStore(join(dir, 'shards-only'));
        await trainLocal(world, run, { ssdOffload: { store: shardsOnly } });
        expect(store.stats().bytesWritten).toBeGreaterThan(shardsOnly.stats().bytesWritten);
      });
    }
  }
});

describe('ssdOffload.offloadGradients: what the memory holds', () => {
  it('after backward, the gradient shards are in the store, not in memory; optimizer.step() refuses them by name', async () => {
    const held: number[] = [];
    for (const offloadGradients of [false, true]) {
      const [group] = createLocalGroups(1);
      const backend = createCpuBackend();
      const store = new NodeFileStore(join(dir, `${offloadGradients}`));
      const model = wrapNet(
        new Net(SMALL, backend, 0),
        group!,
        { ssdOffload: { store, offloadGradients } },
        true,
      );
      const optimizer = new AdamW(model.parameters(), { lr: 0.01 });
      const [batch] = makeBatches(backend, SMALL, 1, 8);
      const [x, y] = slice(backend, batch!, 0, 8);
      const loss = await model.call(x, y);
      await loss.backward();
      loss.free();
      held.push(backend.memoryStats().allocated);
      const gradBytes = model
        .units()
        .flatMap((u) => u.flatParameters)
        .reduce((n, f) => n + f.shardNumel * 4, 0);
      if (offloadGradients) {
        // Allocated bytes are size-class rounded: at least the gradient bytes fewer.
        expect(held[0]! - held[1]!).toBeGreaterThanOrEqual(gradBytes);
        for (const u of model.units())
          for (const f of u.flatParameters) expect(f.shard.grad!.isFreed).toBe(true);
      }
      // The optimizer's own step reads each stored gradient back with its shard and state.
      optimizer.step();
      optimizer.zeroGrad();
      for (const u of model.units())
        for (const f of u.flatParameters) expect(f.shard.grad).toBeNull();
      x.free();
      y.free();
      await group!.close();
    }
  });
});
