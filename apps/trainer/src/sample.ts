import { ArgumentError, type GPT, mulberry32, noGrad, tensor } from '@webshard/tensor-core';
import type { Decoder } from './data/dataset.js';
import type { EvalForward } from './evaluate.js';

/**
 * [Note: sampling a padded vocabulary]
 * The model's vocabulary can be larger than the tokenizer's: `--vocab-size 50304` pads GPT-2's
 * 50257 to a multiple of 64, as nanoGPT does. The padded rows of `lm_head` are trained only toward
 * never being targets, but an untrained (or briefly trained) model gives them logits like any
 * other, so sampling from all of them draws ids no tokenizer can decode. `drawToken` masks every
 * id at or past the decoder's `vocabSize` (their weight is 0, as a logit of -inf), so a sample
 * holds only ids the decoder knows; the decoders turn any id they do not know into U+FFFD rather
 * than throwing, so a decode after training cannot fail either.
 */

/**
 * The next token from one position's logits: temperature sampling over ids below `vocabLimit`
 * (ids at or past it are masked, see [Note: sampling a padded vocabulary]), `u` a uniform draw in
 * [0, 1). Exp is taken after subtracting the largest unmasked logit, as softmax does.
 */
export function drawToken(
  logits: ArrayLike<number>,
  vocabLimit: number,
  temperature: number,
  u: number,
): number {
  const n = Math.min(logits.length, vocabLimit);
  if (!(n > 0)) {
    throw new ArgumentError(
      'sample',
      `no token to draw: ${logits.length} logits, vocabulary ${vocabLimit}`,
    );
  }
  if (!(temperature > 0)) {
    throw new ArgumentError('sample', `temperature ${temperature} must be positive`);
  }
  let max = Number.NEGATIVE_INFINITY;
  for (let k = 0; k < n; k++) max = Math.max(max, logits[k]!);
  const weights = new Float64Array(n);
  let total = 0;
  for (let k = 0; k < n; k++) {
    weights[k] = Math.exp((logits[k]! - max) / temperature);
    total += weights[k]!;
  }
  let left = u * total;
  for (let k = 0; k < n; k++) {
    left -= weights[k]!;
    if (left <= 0) return k;
  }
  return n - 1;
}

/**
 * Sample `length` tokens after `prompt` (temperature sampling from the last position's logits,
 * seeded), as nanoGPT's `sample.py`, and decode them with the prompt. Only ids the decoder knows are
 * drawn (see [Note: sampling a padded vocabulary]).
 */
export async function sample(
  model: GPT,
  forward: EvalForward,
  decoder: Decoder,
  options: { prompt?: string; length?: number; temperature?: number; seed?: number } = {},
): Promise<string> {
  const random = mulberry32(options.seed ?? 1);
  const temperature = options.temperature ?? 0.8;
  const backend = model.wte.weight.backend;
  const ids = [...(decoder.encode(options.prompt ?? '\n') ?? [0])];
  const { blockSize, vocabSize } = model.config;
  for (let i = 0; i < (options.length ?? 200); i++) {
    const context = ids.slice(-blockSize);
    const input = tensor(context, { backend, dtype: 'i32', shape: [1, context.length] });
    const out = await noGrad(() => forward(input, null));
    const logits = await out.logits!.read();
    input.free();
    out.logits!.free();
    const last = logits.subarray((context.length - 1) * vocabSize, context.length * vocabSize);
    ids.push(drawToken(last, decoder.vocabSize, temperature, random()));
  }
  return decoder.decode(ids);
}
