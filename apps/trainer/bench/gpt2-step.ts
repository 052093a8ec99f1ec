/**
 * [Note: the GPT-2 124M step row]
 * Issue 49's measure of the CPU backend at the size users train: one GPT-2 124M training step
 * (B4 T256, forward, backward, clip, AdamW; `gpt-step.ts`) in this process, against PyTorch's
 * step on the same model in PyPI's CPU wheel (`torch_step.py`) on 2 threads and on 1, the better
 * one as the peer. PyTorch runs before and after ours (its process and our model would share the
 * memory if they ran together), and its faster run is kept; ours is the median of 3 steps after
 * two warm-ups (the first builds the kernels and the allocator's caches, the second still makes
 * 1.2 GB of fresh blocks; one until 2026-11-28, when the median was that of a second step, a
 * steady one and a third, 12.8, 10.0 and 10.0 s in one run). Some 2 minutes on the
 * quiet 2-core machine, 4 GB; only with `WEBSHARD_BENCH_GPT2` set, and skipped with the reason
 * where there is no PyTorch peer (`pnpm peers:torch`).
 */
import { loadavg } from 'node:os';
import type { BenchRow } from '@webshard/bench';
import { createBackend, relaxedFmaSupport } from '@webshard/tensor-core';
import { buildTrainStep, GPT2_STEP, torchStepTimes } from './gpt-step.js';

export const GPT2_STEP_ROW = 'GPT-2 124M, single-process step';

const load = () =>
  loadavg()
    .map((v) => v.toFixed(1))
    .join(' ');

/** Our median step of GPT-2 124M on the CPU backend, as the trainer builds its matmul. */
async function ourStepMs(steps: number): Promise<number> {
  const matmulFma = relaxedFmaSupport() === 'fused' ? 'auto' : 'off';
  const cpu = await createBackend({ kind: 'cpu', matmulFma });
  const { step, free } = buildTrainStep(GPT2_STEP, cpu);
  try {
    for (let i = 0; i < GPT2_STEP.warmup; i++) await step();
    const times: number[] = [];
    for (let i = 0; i < steps; i++) {
      const t0 = performance.now();
      await step();
      times.push(performance.now() - t0);
    }
    console.log(
      `${GPT2_STEP_ROW}: ours ${times.map((t) => t.toFixed(0)).join(', ')} ms (load ${load()})`,
    );
    return times.sort((a, b) => a - b)[Math.floor(times.length / 2)]!;
  } finally {
    free();
    cpu.dispose();
  }
}

/** The row ([Note: the GPT-2 124M step row]), or none where PyTorch is missing. */
export async function gpt2StepRows(threads: number): Promise<BenchRow[]> {
  const size = { ...GPT2_STEP, steps: 3 };
  const counts = threads > 1 ? [threads, 1] : [1];
  const before = torchStepTimes(size, counts);
  if ('skipped' in before) {
    console.log(`${GPT2_STEP_ROW}: skipped (${before.skipped})`);
    return [];
  }
  const ours = await ourStepMs(3);
  const after = torchStepTimes(size, counts);
  if ('skipped' in after) throw new Error(`${GPT2_STEP_ROW}: PyTorch vanished: ${after.skipped}`);
  let best = { n: 0, ms: Number.POSITIVE_INFINITY };
  for (const run of [before, after]) {
    for (const [n, ms] of run.ms) {
      console.log(`${GPT2_STEP_ROW}: ${before.label}, ${n} thread(s): ${ms.toFixed(0)} ms`);
      if (ms < best.ms) best = { n, ms };
    }
  }
  const tokens = GPT2_STEP.batch * GPT2_STEP.config.blockSize;
  return [
    {
      name: GPT2_STEP_ROW,
      metric: 'cpu backend throughput',
      value: (tokens * 1000) / ours,
      unit: 'tokens/s',
      peer: `${before.label}, ${best.n} thread${best.n === 1 ? '' : 's'}`,
      peerValue: (tokens * 1000) / best.ms,
    },
  ];
}
