import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalGroups } from '@webshard/collectives';
import { AdamW, createCpuBackend, OutOfMemoryError } from '@webshard/tensor-core';
import { sizeClass } from '@webshard/tensor-core/backend';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { defaultPredivideFactor, type FsdpOptions } from '../api.js';
import { makeBatches, Net, type NetConfig, slice } from '../test-support/models.js';
import { wrapNet } from '../test-support/parity.js';
import { NodeFileStore } from './node-file-store.js';
import { stepOffloaded } from './ssd-offload.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fsdp-ssd-limit-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const CONFIG: NetConfig = { inFeatures: 8, width: 32, hidden: 128, depth: 8, outFeatures: 4 };

/** Each rank: wrap (every block a unit), then cap its backend at `limit()` and train 3 steps. */
async function train(
  world: number,
  limit: () => number | undefined,
  options: Omit<FsdpOptions, 'group'>,
): Promise<{ losses: number[]; peak: number; stepPeak: number; allocated: number }[]> {
  const groups = createLocalGroups(world, { timeoutMs: 20_000 });
  try {
    return await Promise.all(
      groups.map(async (group) => {
        const backend = createCpuBackend();
        const model = wrapNet(new Net(CONFIG, backend, 0), group, options, true);
        const optimizer = new AdamW(model.parameters(), { lr: 0.01 });
        const allocated = backend.memoryStats().allocated;
        backend.setMemoryLimit(limit());
        backend.resetPeakMemoryStats();
        const losses: number[] = [];
        let stepPeak = 0;
        let overall = 0;
        for (const batch of makeBatches(backend, CONFIG, 3, 8)) {
          const rows = 8 / world;
          const [x, y] = slice(backend, batch, group.rank * rows, (group.rank + 1) * rows);
          const loss = await model.call(x, y);
          losses.push(await loss.item());
          await loss.backward();
          for (const t of [x, y, loss]) t.free();
          // The step's own peak: from the end of backward to zeroGrad (the peak before it kept).
          const peak = backend.memoryStats().peakAllocated;
          backend.resetPeakMemoryStats();
          if (options.ssdOffload) await stepOffloaded(model, optimizer);
          else optimizer.step();
          optimizer.zeroGrad();
          stepPeak = Math.max(stepPeak, backend.memoryStats().peakAllocated);
          overall = Math.max(overall, peak, backend.memoryStats().peakAllocated);
          backend.resetPeakMemoryStats();
        }
        return { losses, peak: overall, stepPeak, allocated };
      }),
    );
  } finally {
    await Promise.all(groups.map((g) => g.close()));
  }
}

/** Below what in-memory FSDP needs (1.36 MB at its peak), above what ssdOffload needs (0.43 MB). */
const LIMIT = 768 * 1024;

describe('ssdOffload under an emulated host memory limit', () => {
  it('in-memory FSDP runs out of memory; with ssdOffload the same model trains to the same losses, with offloadGradients at a lower step peak', async () => {
    // Every reduce-scatter on its own: the bucket would be most of the peak at this size.
    const reference = await train(2, () => undefined, { bucketCapMb: 0 });
    // Shards, gradients and Adam's two moments (each the shards' size, in the allocator's size
    // classes) alone pass the limit.
    expect(4 * reference[0]!.allocated).toBeGreaterThan(LIMIT);
    await expect(train(2, () => LIMIT, { bucketCapMb: 0 })).rejects.toBeInstanceOf(
      OutOfMemoryError,
    );
    const store = new NodeFileStore(dir);
    const offloaded = await train(2, () => LIMIT, { bucketCapMb: 0, ssdOffload: { store } });
    for (let r = 0; r < 2; r++) {
      expect(offloaded[r]!.losses).toEqual(reference[r]!.losses);
      expect(offloaded[r]!.peak).toBeLessThanOrEqual(LIMIT);
    }
    const grads = new NodeFileStore(join(dir, 'grads'));
    const withGrads = await train(2, () => LIMIT, {
      bucketCapMb: 0,
      ssdOffload: { store: grads, offloadGradients: true },
    });
    // Gradients in the store too: the step holds one unit's gradient, not all of them (0.36 MB ->
    // 0.13 MB); the overall peak is backward's, where every reduced gradient shard is still in
    // memory until its end (0.47 MB either way, alone). Backward's peak moves with when the
    // reductions complete: a block's reduce-scatter that completed at a progress turn of the next
    // block's backward ([Note: progress turns] in the collectives) no longer holds the block's flat
    // gradient and its pre-divided copy (469248 against 534272 bytes, in a loaded run's two
    // modes), and the store's reads and writes move when that turn comes. So "offloadGradients
    // does not raise backward's peak" allows that one block.
    const block = new Net(CONFIG, createCpuBackend(), 0).blocks.at(0)!;
    const blockNumel = block.parameters().reduce((n, p) => n + p.size, 0);
    const reduction = sizeClass(4 * blockNumel) * (defaultPredivideFactor(2) === 1 ? 1 : 2);
    for (let r = 0; r < 2; r++) {
      expect(withGrads[r]!.losses).toEqual(reference[r]!.losses);
      expect(withGrads[r]!.stepPeak).toBeLessThan(offloaded[r]!.stepPeak / 2);
      expect(withGrads[r]!.peak).toBeLessThanOrEqual(offloaded[r]!.peak + reduction);
    }
  });
});
