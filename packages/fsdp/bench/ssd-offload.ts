// What `ssdOffload` costs: the benchmark's GPT (one unit per block), 2 ranks in this process over
// the local transport on the CPU backend, shards and Adam's state in files (a NodeFileStore in a
// temporary directory) against the same run with everything in memory: step time and the bytes
// read and written per step and rank, the allocator's peak; with each of ssdOffload's options
// (readAhead, offloadGradients), without the prefetch (limitAllGathers 0), and stepping with
// stepOffloaded instead of the plain loop's optimizer.step().
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalGroups } from '@webshard/collectives';
import type { BenchRow } from '@webshard/bench';
import { AdamW, createCpuBackend, GPTBlock, type Tensor } from '@webshard/tensor-core';
import { NodeFileStore } from '../src/checkpoint/index.js';
import { autoWrap, moduleClassAutoWrapPolicy, ssdStats, stepOffloaded } from '../src/index.js';
import { Gpt, type GptConfig, tokenBatches, tokenSlice } from '../src/test-support/gpt.js';

export interface SsdCost {
  readonly stepMs: number;
  /**
   * CPU time of the whole process (both ranks) per step, median: what load from other work
   * disturbs least (it leaves out waits on the disk).
   */
  readonly cpuMs: number;
  /** Bytes read from the store per step and rank (median over the timed steps; 0 in memory). */
  readonly bytesRead: number;
  readonly bytesWritten: number;
  /** This rank's FP32 shard bytes, for scale. */
  readonly shardBytes: number;
  /** The allocator's peak over the timed steps, and over their optimizer step alone. */
  readonly peakBytes: number;
  readonly stepPeakBytes: number;
}

/** In memory, or shards and state in the store with some of its options. */
export interface SsdMode {
  readonly offload: boolean;
  readonly offloadGradients?: boolean;
  readonly readAhead?: boolean;
  /** FSDP's `limitAllGathers` (default 1; 0 turns the prefetch off). */
  readonly limitAllGathers?: number;
  /** Step with `await stepOffloaded(model, optimizer)` instead of `optimizer.step()`. */
  readonly stepOffloaded?: boolean;
}

/** The variants the bench compares, by name: in memory first. */
export const SSD_MODES: readonly (readonly [string, SsdMode])[] = [
  ['in memory', { offload: false }],
  ['ssdOffload (defaults)', { offload: true }],
  ['readAhead', { offload: true, readAhead: true }],
  ['offloadGradients', { offload: true, offloadGradients: true }],
  ['readAhead + offloadGradients', { offload: true, readAhead: true, offloadGradients: true }],
  ['no prefetch (limitAllGathers 0)', { offload: true, limitAllGathers: 0 }],
  ['stepOffloaded instead of optimizer.step()', { offload: true, stepOffloaded: true }],
];

const median = (v: number[]) => [...v].sort((a, b) => a - b)[v.length >> 1]!;

/** Train `steps` steps (the first untimed) with or without `ssdOffload`; rank 0's numbers. */
export async function ssdCost(
  config: GptConfig,
  rows: number,
  steps: number,
  mode: SsdMode,
): Promise<SsdCost> {
  const { offload, offloadGradients = false, readAhead = false, limitAllGathers = 1 } = mode;
  const dir = await mkdtemp(join(tmpdir(), 'fsdp-bench-ssd-'));
  const groups = createLocalGroups(2, { timeoutMs: 120_000 });
  try {
    const results = await Promise.all(
      groups.map(async (group) => {
        const backend = createCpuBackend();
        const store = new NodeFileStore(join(dir, `rank${group.rank}`));
        const model = autoWrap(new Gpt(config, backend), moduleClassAutoWrapPolicy([GPTBlock]), {
          group,
          limitAllGathers,
          ...(offload ? { ssdOffload: { store, offloadGradients, readAhead } } : {}),
        });
        const optimizer = new AdamW(model.parameters(), { lr: 1e-3 });
        const times: number[] = [];
        const cpu: number[] = [];
        const reads: number[] = [];
        const writes: number[] = [];
        let peakBytes = 0;
        let stepPeakBytes = 0;
        for (const [i, batch] of tokenBatches(config, steps, 2 * rows).entries()) {
          const [x, y] = tokenSlice(backend, batch, group.rank * rows, (group.rank + 1) * rows);
          store.resetStats();
          const t0 = performance.now();
          const c0 = process.cpuUsage();
          backend.resetPeakMemoryStats();
          const loss = (await model.call(x, y)) as Tensor;
          await loss.backward();
          const backwardPeak = backend.memoryStats().peakAllocated;
          backend.resetPeakMemoryStats();
          if (mode.stepOffloaded === true) await stepOffloaded(model, optimizer);
          else optimizer.step();
          optimizer.zeroGrad();
          times.push(performance.now() - t0);
          const used = process.cpuUsage(c0);
          cpu.push((used.user + used.system) / 1000);
          const stepPeak = backend.memoryStats().peakAllocated;
          if (i > 0) {
            peakBytes = Math.max(peakBytes, backwardPeak, stepPeak);
            stepPeakBytes = Math.max(stepPeakBytes, stepPeak);
          }
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
          cpuMs: median(cpu.slice(1)),
          bytesRead: median(reads.slice(1)),
          bytesWritten: median(writes.slice(1)),
          shardBytes,
          peakBytes,
          stepPeakBytes,
        };
      }),
    );
    return results[0]!;
  } finally {
    await Promise.all(groups.map((g) => g.close()));
    await rm(dir, { recursive: true, force: true });
  }
}

/** The bench rows of `costs` (labelled as `SSD_MODES`, in memory first). */
export function ssdRows(costs: readonly (readonly [string, SsdCost])[]): BenchRow[] {
  const MiB = 2 ** 20;
  const [, inMemory] = costs[0]!;
  const rows: BenchRow[] = [];
  for (const [label, cost] of costs.slice(1)) {
    const name = `GPT 4x96, 2 ranks (local, CPU), ssdOffload: ${label}`;
    const peer = { peer: 'FSDP, shards in memory' };
    rows.push({
      name,
      metric: 'step, vs shards in memory',
      value: cost.stepMs,
      unit: 'ms',
      ...peer,
      peerValue: inMemory.stepMs,
    });
    rows.push({ name, metric: 'read per step and rank', value: cost.bytesRead / MiB, unit: 'MiB' });
    rows.push({
      name,
      metric: 'written per step and rank',
      value: cost.bytesWritten / MiB,
      unit: 'MiB',
    });
    rows.push({
      name,
      metric: 'peak per rank (allocator), vs shards in memory',
      value: cost.peakBytes / MiB,
      unit: 'MiB',
      ...peer,
      peerValue: inMemory.peakBytes / MiB,
    });
    rows.push({
      name,
      metric: 'peak during the step (allocator), vs shards in memory',
      value: cost.stepPeakBytes / MiB,
      unit: 'MiB',
      ...peer,
      peerValue: inMemory.stepPeakBytes / MiB,
    });
  }
  rows.push({
    name: 'GPT 4x96, 2 ranks (local, CPU), ssdOffload',
    metric: 'FP32 shards per rank',
    value: costs[1]![1].shardBytes / MiB,
    unit: 'MiB',
  });
  return rows;
}
