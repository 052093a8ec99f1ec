/**
 * The step profile ([Note: the step profile] in tooling/bench): where one training step of the CPU
 * backend goes, by kernel category, with each category's GFLOP/s or GB/s against this machine's
 * ceilings (one thread's WebAssembly SIMD arithmetic times the matmul's threads; the bandwidth of a
 * 64 MiB copy), beside PyTorch's step on the same model where the PyTorch peer is there.
 * `WEBSHARD_PROFILE=1 pnpm --filter @webshard/trainer bench` profiles the default model (B16 T32,
 * 3 warm-up steps, 10 measured); `WEBSHARD_PROFILE=gpt2` GPT-2 124M (12 layers, 12 heads, 768
 * wide, nanoGPT's padded vocabulary 50304, B4 T256: 2 warm-up steps and 1 measured, about 4 GB).
 * The measured step is a steady one: until 2026-11-28 it was the second, whose 1.2 GB of fresh
 * blocks showed as seconds of fills, copies and element-wise ops on the 154 MB token embedding.
 */
import { availableParallelism, freemem, loadavg } from 'node:os';
import {
  copyBandwidthGbPerS,
  formatProfile,
  profileKernels,
  wasmSimdPeakGflops,
} from '@webshard/bench';
import { type Backend, createBackend, relaxedFmaSupport } from '@webshard/tensor-core';
import { DEFAULT_MODEL } from '../src/train.js';
import { buildTrainStep, GPT2_STEP, type StepSize, torchStepTimes } from './gpt-step.js';

/** The size `WEBSHARD_PROFILE` names: `gpt2`, or anything else for the default model. */
export function profileSize(value: string, defaultVocab: number): StepSize {
  if (value === 'gpt2') return GPT2_STEP;
  return {
    name: `default GPT (${DEFAULT_MODEL.nLayer}x${DEFAULT_MODEL.nEmbd}), B16 T${DEFAULT_MODEL.blockSize}`,
    config: { ...DEFAULT_MODEL, vocabSize: defaultVocab },
    batch: 16,
    warmup: 3,
    steps: 10,
  };
}

/** PyTorch's median step at this size, or the reason there is none. */
function torchStep(size: StepSize, threads: number): string {
  const torch = torchStepTimes(size, threads > 1 ? [threads, 1] : [1]);
  if ('skipped' in torch) return `PyTorch: skipped (${torch.skipped})`;
  const parts = [...torch.ms].map(
    ([n, ms]) => `${n} thread${n === 1 ? '' : 's'} ${ms.toFixed(1)} ms`,
  );
  return `${torch.label}, the same step: ${parts.join(', ')} (median of ${torch.iters} after ${size.warmup} warm-up)`;
}

/** The profile's table, the step time and the backend's description: the model is gone after. */
async function profileStep(size: StepSize, ceilings: { gflops: number; gbPerS: number }) {
  // The matmul the trainer runs in one process: fused where this engine fuses (ranks/job-fma.ts).
  const matmulFma = relaxedFmaSupport() === 'fused' ? 'auto' : 'off';
  const cpu = await createBackend({ kind: 'cpu', matmulFma });
  const { backend, profile } = profileKernels<Backend>(cpu, {
    sequenceLength: size.config.blockSize,
  });
  const { step, free } = buildTrainStep(size, backend);
  for (let i = 0; i < size.warmup; i++) await step();
  profile.reset();
  const t0 = performance.now();
  for (let i = 0; i < size.steps; i++) await step();
  const stepMs = (performance.now() - t0) / size.steps;
  const top = Number(process.env.WEBSHARD_PROFILE_TOP ?? 0);
  const table =
    formatProfile(profile, stepMs, size.steps, ceilings) +
    (top > 0 ? `\n\n${profile.topKernels(top, size.steps)}` : '');
  const description = cpu.description;
  free();
  cpu.dispose();
  return { table, stepMs, description };
}

/**
 * Profiles `size` on the CPU backend and prints the table, the ceilings, the load and PyTorch's
 * step on the same model.
 */
export async function runStepProfile(size: StepSize): Promise<void> {
  const load = () =>
    loadavg()
      .map((v) => v.toFixed(1))
      .join(' ');
  const gib = (freemem() / 2 ** 30).toFixed(1);
  console.log(`step profile: ${size.name}; load average ${load()}; free memory ${gib} GiB`);
  const threads = availableParallelism();
  // The ceiling of the instructions the matmul runs: relaxed SIMD's multiply-add where it fuses.
  const fma = relaxedFmaSupport() === 'fused';
  const perThread = wasmSimdPeakGflops(7, 60, fma);
  const gflops = perThread * threads;
  const gbPerS = copyBandwidthGbPerS();
  // PyTorch first, before our model exists: its process and our model would share the memory.
  const torch = torchStep(size, threads);
  const { table, stepMs, description } = await profileStep(size, { gflops, gbPerS });
  console.log(
    `\n${size.name}, CPU backend (${description}): ${stepMs.toFixed(1)} ms a step (mean of ${size.steps}); load average ${load()}\n`,
  );
  console.log(table);
  console.log(
    `\nceilings: WebAssembly SIMD f32${fma ? ' (relaxed FMA)' : ''} ${perThread.toFixed(1)} GFLOP/s a thread x ${threads} threads = ${gflops.toFixed(1)}; 64 MiB copy ${gbPerS.toFixed(2)} GB/s (read + written)`,
  );
  console.log(torch);
  console.log(`load average ${load()}`);
}
