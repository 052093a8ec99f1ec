/**
 * The step profile ([Note: the step profile] in tooling/bench): where one training step of the CPU
 * backend goes, by kernel category, with each category's GFLOP/s or GB/s against this machine's
 * ceilings (one thread's WebAssembly SIMD arithmetic times the matmul's threads; the bandwidth of a
 * 64 MiB copy), beside PyTorch's step on the same model where the PyTorch peer is there.
 * `WEBSHARD_PROFILE=1 pnpm --filter @webshard/trainer bench` profiles the default model (B16 T32,
 * 3 warm-up steps, 10 measured); `WEBSHARD_PROFILE=gpt2` GPT-2 124M (12 layers, 12 heads, 768
 * wide, nanoGPT's padded vocabulary 50304, B4 T256: 1 warm-up step and 1 measured, about 4 GB).
 */
import { availableParallelism, freemem, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import {
  copyBandwidthGbPerS,
  findRepoRoot,
  findTorchPeer,
  formatProfile,
  profileKernels,
  runTorchScript,
  wasmSimdPeakGflops,
} from '@webshard/bench';
import {
  AdamW,
  type Backend,
  createBackend,
  GPT,
  type GPTConfig,
  RandomGenerator,
  relaxedFmaSupport,
  tensor,
} from '@webshard/tensor-core';
import { DEFAULT_MODEL } from '../src/train.js';
import { decayGroups, trainStep } from '../src/train-step.js';

/** One profiled size: the model, the batch, and how many steps warm up and are measured. */
interface ProfileSize {
  name: string;
  config: GPTConfig;
  batch: number;
  warmup: number;
  steps: number;
}

/** The size `WEBSHARD_PROFILE` names: `gpt2`, or anything else for the default model. */
export function profileSize(value: string, defaultVocab: number): ProfileSize {
  if (value === 'gpt2') {
    const config = { vocabSize: 50304, blockSize: 256, nLayer: 12, nHead: 12, nEmbd: 768 };
    return {
      name: 'GPT-2 124M (12x768, vocabulary 50304), B4 T256',
      config: { ...config, dropout: 0, bias: true },
      batch: 4,
      warmup: 1,
      steps: 1,
    };
  }
  return {
    name: `default GPT (${DEFAULT_MODEL.nLayer}x${DEFAULT_MODEL.nEmbd}), B16 T${DEFAULT_MODEL.blockSize}`,
    config: { ...DEFAULT_MODEL, vocabSize: defaultVocab },
    batch: 16,
    warmup: 3,
    steps: 10,
  };
}

/** Random token ids in [0, vocab), seeded (the profile needs shapes, not text). */
function tokens(count: number, vocab: number, seed: number): Int32Array {
  const out = new Int32Array(count);
  let state = seed >>> 0;
  for (let i = 0; i < count; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    out[i] = state % vocab;
  }
  return out;
}

/** PyTorch's median step at this size, or the reason there is none. */
function torchStep(size: ProfileSize, threads: number): string {
  const peer = findTorchPeer(findRepoRoot(fileURLToPath(import.meta.url)), 'speed');
  if ('skipped' in peer) return `PyTorch: skipped (${peer.skipped})`;
  const { vocabSize, nLayer, nHead, nEmbd, blockSize } = size.config;
  const script = fileURLToPath(new URL('./torch_step.py', import.meta.url));
  const counts = threads > 1 ? [threads, 1] : [1];
  const iters = Math.min(3, size.steps);
  const parts = counts.map((n) => {
    const args = [vocabSize, nLayer, nHead, nEmbd, blockSize, size.batch, n, size.warmup, iters];
    const { ms } = runTorchScript<{ ms: number }>(peer.build, script, args.map(String), {
      timeoutMs: 600_000,
    });
    return `${n} thread${n === 1 ? '' : 's'} ${ms.toFixed(1)} ms`;
  });
  return `${peer.label}, the same step: ${parts.join(', ')} (median of ${iters} after ${size.warmup} warm-up)`;
}

/** The profile's table, the step time and the backend's description: the model is gone after. */
async function profileStep(size: ProfileSize, ceilings: { gflops: number; gbPerS: number }) {
  // The matmul the trainer runs in one process: fused where this engine fuses (ranks/job-fma.ts).
  const matmulFma = relaxedFmaSupport() === 'fused' ? 'auto' : 'off';
  const cpu = await createBackend({ kind: 'cpu', matmulFma });
  const { backend, profile } = profileKernels<Backend>(cpu, {
    sequenceLength: size.config.blockSize,
  });
  const model = new GPT(size.config, { backend, generator: new RandomGenerator(1) });
  const params = model.parameters();
  const optimizer = new AdamW(decayGroups(model, 0.1), { lr: 3e-4, betas: [0.9, 0.95] });
  const { vocabSize, blockSize } = size.config;
  const shape = [size.batch, blockSize];
  const count = size.batch * blockSize;
  let seed = 1;
  const step = async () => {
    const inputs = tensor(tokens(count, vocabSize, seed++), { backend, dtype: 'i32', shape });
    const targets = tensor(tokens(count, vocabSize, seed++), { backend, dtype: 'i32', shape });
    await trainStep(
      params,
      optimizer,
      () => {
        const out = model.call(inputs, targets);
        out.logits.free();
        return out.loss!;
      },
      { clip: 1 },
    );
    inputs.free();
    targets.free();
  };
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
  for (const param of params) param.free();
  cpu.dispose();
  return { table, stepMs, description };
}

/**
 * Profiles `size` on the CPU backend and prints the table, the ceilings, the load and PyTorch's
 * step on the same model.
 */
export async function runStepProfile(size: ProfileSize): Promise<void> {
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
