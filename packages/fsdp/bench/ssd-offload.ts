// What `ssdOffload` costs: the benchmark's GPT (one unit per block), 2 ranks in this process over
// the local transport on the CPU backend, shards and Adam's state in files (a NodeFileStore in a
// temporary directory) against the same run with everything in memory: step time and the bytes
// read and written per step and rank.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalGroups } from '@webshard/collectives';
import { AdamW, createCpuBackend, type Tensor } from '@webshard/tensor-core';
import { NodeFileStore } from '../src/checkpoint/index.js';
import { autoWrap, moduleClassAutoWrapPolicy, ssdStats, stepOffloaded } from '../src/index.js';
import {
  Gpt,
  GptBlock,
  type GptConfig,
  tokenBatches,
  tokenSlice,
} from '../src/test-support/gpt.js';

export interface SsdCost {
  readonly stepMs: number;
  /** Bytes read from the store per step and rank (median over the timed steps; 0 in memory). */
  readonly bytesRead: number;
  readonly bytesWritten: number;
  /** This rank's FP32 shard bytes, for scale. */
  readonly shardBytes: number;
}

const median = (v: number[]) => [...v].sort((a, b) => a - b)[v.length >> 1]!;

/** Train `steps` steps (the first untimed) with or without `ssdOffload`; rank 0's numbers. */
export async function ssdCost(
  config: GptConfig,
  rows: number,
  steps: number,
  offload: boolean,
): Promise<SsdCost> {
  const dir = await mkdtemp(join(tmpdir(), 'fsdp-bench-ssd-'));
  const groups = createLocalGroups(2, { timeoutMs: 120_000 });
  try {
    const results = await Promise.all(
      groups.map(async (group) => {
        const backend = createCpuBackend();
        const store = new NodeFileStore(join(dir, `rank${group.rank}`));
        const model = autoWrap(new Gpt(config, backend), moduleClassAutoWrapPolicy([GptBlock]), {
          group,
          ...(offload ? { ssdOffload: { store } } : {}),
        });
        const optimizer = new AdamW(model.parameters(), { lr: 1e-3 });
        const times: number[] = [];
        const reads: number[] = [];
        const writes: number[] = [];
        for (const batch of tokenBatches(config, steps, 2 * rows)) {
          const [x, y] = tokenSlice(backend, batch, group.rank * rows, (group.rank + 1) * rows);
          store.resetStats();
          const t0 = performance.now();
          const loss = (await model.call(x, y)) as Tensor;
          await loss.backward();
          if (offload) await stepOffloaded(model, optimizer);
          else optimizer.step();
          optimizer.zeroGrad();
          times.push(performance.now() - t0);
          const stats = ssdStats(model);
          reads.push(stats.bytesRead);
          writes.push(stats.bytesWritten);
          for (const t of [x, y, loss]) t.free();
        }
        const shardBytes = model
          .units()
          .reduce((n, u) => n + u.flatParameters.reduce((m, f) => m + 4 * f.shardNumel, 0), 0);
        return {
          stepMs: median(times.slice(1)),
          bytesRead: median(reads.slice(1)),
          bytesWritten: median(writes.slice(1)),
          shardBytes,
        };
      }),
    );
    return results[0]!;
  } finally {
    await Promise.all(groups.map((g) => g.close()));
    await rm(dir, { recursive: true, force: true });
  }
}
