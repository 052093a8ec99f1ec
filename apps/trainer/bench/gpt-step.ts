/**
 * One training step of nanoGPT's GPT on the CPU backend as the trainer takes it (forward,
 * backward, clip at 1, AdamW with nanoGPT's two groups), on seeded random tokens, and PyTorch's
 * step on the same model (`torch_step.py`): what the step profile and the GPT-2 step row time.
 */
import { fileURLToPath } from 'node:url';
import { findRepoRoot, findTorchPeer, runTorchScript } from '@webshard/bench';
import {
  AdamW,
  type Backend,
  GPT,
  type GPTConfig,
  RandomGenerator,
  tensor,
} from '@webshard/tensor-core';
import { decayGroups, trainStep } from '../src/train-step.js';

/** One timed size: the model, the batch, and how many steps warm up and are measured. */
export interface StepSize {
  name: string;
  config: GPTConfig;
  batch: number;
  warmup: number;
  steps: number;
}

/** GPT-2 small at nanoGPT's padded vocabulary, B4 T256 (about 4 GB on the CPU backend). */
export const GPT2_STEP: StepSize = {
  name: 'GPT-2 124M (12x768, vocabulary 50304), B4 T256',
  config: {
    vocabSize: 50304,
    blockSize: 256,
    nLayer: 12,
    nHead: 12,
    nEmbd: 768,
    dropout: 0,
    bias: true,
  },
  batch: 4,
  // Two: the allocator still makes 1.2 GB of fresh blocks in the second step (their pages are
  // touched for the first time there, some 2-3 s of that step), none from the third on.
  warmup: 2,
  steps: 1,
};

/** Random token ids in [0, vocab), seeded (a step's time needs shapes, not text). */
export function randomTokens(count: number, vocab: number, seed: number): Int32Array {
  const out = new Int32Array(count);
  let state = seed >>> 0;
  for (let i = 0; i < count; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    out[i] = state % vocab;
  }
  return out;
}

/** The model of `size` on `backend` and its step; `free` releases its parameters. */
export function buildTrainStep(size: StepSize, backend: Backend) {
  const model = new GPT(size.config, { backend, generator: new RandomGenerator(1) });
  const params = model.parameters();
  const optimizer = new AdamW(decayGroups(model, 0.1), { lr: 3e-4, betas: [0.9, 0.95] });
  const { vocabSize, blockSize } = size.config;
  const shape = [size.batch, blockSize];
  const count = size.batch * blockSize;
  let seed = 1;
  const step = async () => {
    const inputs = tensor(randomTokens(count, vocabSize, seed++), { backend, dtype: 'i32', shape });
    const targets = tensor(randomTokens(count, vocabSize, seed++), {
      backend,
      dtype: 'i32',
      shape,
    });
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
  return {
    step,
    free: () => {
      for (const param of params) param.free();
    },
  };
}

/** PyTorch's median step of `size` on each thread count, or why there is none. */
export function torchStepTimes(
  size: StepSize,
  threadCounts: readonly number[],
): { label: string; ms: Map<number, number>; iters: number } | { skipped: string } {
  const peer = findTorchPeer(findRepoRoot(fileURLToPath(import.meta.url)), 'speed');
  if ('skipped' in peer) return peer;
  const { vocabSize, nLayer, nHead, nEmbd, blockSize } = size.config;
  const script = fileURLToPath(new URL('./torch_step.py', import.meta.url));
  const iters = Math.min(3, size.steps);
  const ms = new Map<number, number>();
  for (const n of threadCounts) {
    const args = [vocabSize, nLayer, nHead, nEmbd, blockSize, size.batch, n, size.warmup, iters];
    const out = runTorchScript<{ ms: number }>(peer.build, script, args.map(String), {
      timeoutMs: 600_000,
    });
    ms.set(n, out.ms);
  }
  return { label: peer.label, ms, iters };
}
