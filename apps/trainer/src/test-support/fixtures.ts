import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Backend, GPTConfig, Tensor } from '@webshard/tensor-core';
import { loadSafetensors } from '@webshard/tensor-core/node';

/** The fixtures made by `__fixtures__/make_fixtures.py` (PyTorch 1.13, CPU). */
export const FIXTURES = join(import.meta.dirname, '..', '..', '__fixtures__');

/** A fixture's JSON: config, optimizer settings, PyTorch's per-step losses and grad norms. */
export interface Reference {
  config: Record<string, number | string | boolean>;
  optimizer: {
    lr: number;
    betas: [number, number];
    eps: number;
    weight_decay: number;
    clip: number;
  };
  steps: number;
  losses: number[];
  gradNorms: number[];
  lossesF64: number[];
  maxRelativeGapF32VsF64: number;
}

export async function readReference(name: 'mlp' | 'gpt'): Promise<Reference> {
  return JSON.parse(await readFile(join(FIXTURES, `${name}.json`), 'utf8')) as Reference;
}

/** The initial weights and the stacked batches of a fixture, on `backend`. */
export async function loadFixture(
  name: 'mlp' | 'gpt',
  backend: Backend,
): Promise<{ weights: Record<string, Tensor>; batches: Record<string, Tensor> }> {
  const weights = await loadSafetensors(join(FIXTURES, `${name}.init.safetensors`), { backend });
  const batches = await loadSafetensors(join(FIXTURES, `${name}.batches.safetensors`), {
    backend,
  });
  return { weights: weights.tensors, batches: batches.tensors };
}

/** Step `step`'s slice of a stacked [steps, ...] batch tensor, as a view. */
export function batchAt(stacked: Tensor, step: number): Tensor {
  const shape = stacked.shape.slice(1);
  const size = shape.reduce((a, b) => a * b, 1);
  return stacked.view(shape, step * size);
}

/** The largest |a - b| / |b| over two equal-length series. */
export function maxRelativeGap(actual: readonly number[], expected: readonly number[]): number {
  let gap = 0;
  expected.forEach((e, i) => {
    gap = Math.max(gap, Math.abs(actual[i]! - e) / Math.abs(e));
  });
  return gap;
}

/** The GPT fixture's config in the model's names. */
export function gptConfigOf(reference: Reference): GPTConfig {
  const c = reference.config;
  return {
    vocabSize: Number(c.vocab_size),
    blockSize: Number(c.block_size),
    nLayer: Number(c.n_layer),
    nHead: Number(c.n_head),
    nEmbd: Number(c.n_embd),
    dropout: Number(c.dropout),
    bias: Boolean(c.bias),
  };
}

/** `gpt-cli.json`: the flags of the CLI run PyTorch made, and its per-step losses. */
export interface CliFixture {
  flags: string[];
  losses: number[];
}

/** The CLI fixture (see [Note: every strategy against PyTorch] in strategies.test.ts). */
export async function readCliFixture(): Promise<CliFixture> {
  return JSON.parse(await readFile(join(FIXTURES, 'gpt-cli.json'), 'utf8')) as CliFixture;
}
