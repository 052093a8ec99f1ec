import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ArgumentError,
  createCpuBackend,
  GPT,
  mulberry32,
  RandomGenerator,
  tensor,
} from '@webshard/tensor-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { datasetFromBytes, UNKNOWN_TOKEN_TEXT } from './data/dataset.js';
import type { EvalForward } from './evaluate.js';
import { drawToken, sample } from './sample.js';
import { runMain, TINY } from './test-support/cli.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'webshard-sample-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** nanoGPT's draw over all the logits, in doubles: the reference for an unpadded vocabulary. */
function referenceDraw(logits: number[], temperature: number, u: number): number {
  const max = Math.max(...logits);
  const weights = logits.map((v) => Math.exp((v - max) / temperature));
  let left = u * weights.reduce((a, b) => a + b, 0);
  for (let k = 0; k < weights.length; k++) {
    left -= weights[k]!;
    if (left <= 0) return k;
  }
  return weights.length - 1;
}

describe('drawToken', () => {
  it('draws as temperature sampling does when nothing is padded', () => {
    const random = mulberry32(7);
    const logits = Array.from({ length: 37 }, () => 4 * random() - 2);
    for (const u of [0, 0.013, 0.25, 0.5, 0.77, 0.999999]) {
      for (const temperature of [0.5, 0.8, 1.3]) {
        expect(drawToken(logits, 37, temperature, u)).toBe(referenceDraw(logits, temperature, u));
      }
    }
  });

  it('never draws a padded id, however large its logit', () => {
    // 10 known ids with small logits, 54 padded ones 50 above them: unmasked, nearly every draw
    // would be padded.
    const logits = Array.from({ length: 64 }, (_, k) => (k < 10 ? k / 10 : 50));
    expect(referenceDraw(logits, 0.8, 0.5)).toBeGreaterThanOrEqual(10);
    const random = mulberry32(3);
    const drawn = Array.from({ length: 500 }, () => drawToken(logits, 10, 0.8, random()));
    expect(Math.max(...drawn)).toBe(9);
    expect(new Set(drawn).size).toBe(10);
    expect(drawToken(logits, 10, 0.8, 0.5)).toBe(referenceDraw(logits.slice(0, 10), 0.8, 0.5));
  });

  it('rejects an empty vocabulary and a temperature that is not positive', () => {
    expect(() => drawToken([1, 2], 0, 1, 0.5)).toThrow(
      new ArgumentError('sample', 'no token to draw: 2 logits, vocabulary 0'),
    );
    expect(() => drawToken([1, 2], 2, 0, 0.5)).toThrow(
      new ArgumentError('sample', 'temperature 0 must be positive'),
    );
  });
});

describe('sample with a padded vocabulary', () => {
  it('decodes only the data set tokens when the padded logits are the largest', async () => {
    const backend = createCpuBackend();
    const data = datasetFromBytes(new TextEncoder().encode('abcdefghij'.repeat(10)), 'x.txt', 4);
    expect(data.decoder.vocabSize).toBe(10);
    const model = new GPT(
      { vocabSize: 64, blockSize: 8, nLayer: 1, nHead: 2, nEmbd: 16, dropout: 0, bias: true },
      { backend, generator: new RandomGenerator(1) },
    );
    // The model's logits, with every padded id raised by 40: unmasked, they would win every draw.
    const forward: EvalForward = async (input) => {
      const { logits } = model.forward(input);
      const values = await logits.read();
      logits.free();
      for (let i = 0; i < values.length; i++) if (i % 64 >= 10) values[i]! += 40;
      return { logits: tensor(values, { backend, shape: [1, input.shape[1]!, 64] }), loss: null };
    };
    const text = await sample(model, forward, data.decoder, { prompt: 'a', length: 30, seed: 5 });
    expect(text).toHaveLength(31);
    expect(text).toMatch(/^a[a-j]{30}$/);
  });

  it('decodes an id past any vocabulary as U+FFFD instead of throwing', () => {
    const text = datasetFromBytes(new TextEncoder().encode('ab'.repeat(40)), 'x.txt', 4);
    expect(text.decoder.decode([0, 1, 2, 182, -1])).toBe(`ab${UNKNOWN_TOKEN_TEXT.repeat(3)}`);
    const bytes = datasetFromBytes(
      Uint8Array.from({ length: 80 }, (_, i) => 200 + (i % 50)),
      'x',
      4,
    );
    expect(bytes.decoder.vocabSize).toBe(256);
    expect(bytes.decoder.decode([65, 256])).toBe(`A${UNKNOWN_TOKEN_TEXT}`);
  });

  it('webshard-train --vocab-size past the data vocabulary samples and exits 0', async () => {
    // The sonnets have 66 characters; 512 pads 446 ids that no character decodes from.
    const run = await runMain([...TINY, '--vocab-size', '512', '--sample-length', '40'], dir);
    expect(run.stderr).toBe('');
    expect(run.exitCode).toBe(0);
    expect(run.stdout).toContain('vocabulary 512)');
    const sampled = run.summary!.sample;
    expect(sampled).toHaveLength(41);
    expect(sampled).not.toContain(UNKNOWN_TOKEN_TEXT);
  });
});
