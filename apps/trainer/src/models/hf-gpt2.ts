import { type GPTConfig, narrow, type Tensor, transpose } from '@webshard/tensor-core';
import { UsageError } from '../errors.js';

/**
 * [Note: transformers' GPT-2 checkpoints]
 * `--init` takes a GPT-2 saved by Hugging Face transformers (`save_pretrained` with safetensors,
 * the hub's `model.safetensors`) as well as nanoGPT's state dicts. The names are nanoGPT's, which
 * copied them: GPT2LMHeadModel's carry the `transformer.` prefix, GPT2Model's (the hub's GPT-2
 * files) do not. What differs is the layout: transformers' `Conv1D` stores its weight [in, out],
 * the transpose of `nn.Linear`'s, for `attn.c_attn`, `attn.c_proj`, `mlp.c_fc` and `mlp.c_proj`;
 * older files also hold the attention's mask buffers (`attn.bias`, `attn.masked_bias`), and
 * `lm_head.weight` is left out (tied to `wte`). The layout is told by the names (no prefix, or the
 * mask buffers) or, for GPT2LMHeadModel's names, by `c_attn.weight`'s shape: [C, 3C] is Conv1D's,
 * [3C, C] Linear's. Converting transposes the Conv1D weights, drops the buffers, crops `wpe` to
 * the model's block size (nanoGPT's `crop_block_size`), and switches the MLP to `gelu_new`, the
 * tanh GELU GPT-2 was trained with (nanoGPT's `from_pretrained` keeps its exact GELU; its logits
 * then differ from transformers' in the fourth digit). The model's `config.geluApproximate`
 * records the switch and `--save` writes it, so a fine-tuned model loads back the same.
 */

const PREFIX = 'transformer.';
const CONV1D = ['attn.c_attn', 'attn.c_proj', 'mlp.c_fc', 'mlp.c_proj'] as const;
const BUFFER = /^h\.\d+\.attn\.(bias|masked_bias)$/;

/** A name without GPT2LMHeadModel's `transformer.` prefix. */
function short(name: string): string {
  return name.startsWith(PREFIX) ? name.slice(PREFIX.length) : name;
}

/** Whether `tensors` are in transformers' GPT-2 layout (see the note above). */
export function isHfGpt2(tensors: Readonly<Record<string, Tensor>>): boolean {
  const names = Object.keys(tensors);
  if (names.some((n) => /^h\.\d+\./.test(n) || n === 'wte.weight')) return true;
  if (names.some((n) => BUFFER.test(short(n)))) return true;
  const cAttn = tensors[`${PREFIX}h.0.attn.c_attn.weight`];
  return cAttn?.rank === 2 && cAttn.shape[1] === 3 * cAttn.shape[0]! && cAttn.shape[0]! > 0;
}

/** The short names a GPT of `config` needs, in state-dict order. */
function expectedNames(config: GPTConfig): string[] {
  const names = ['wte.weight', 'wpe.weight'];
  for (let i = 0; i < config.nLayer; i++) {
    for (const part of ['ln_1', ...CONV1D.slice(0, 2), 'ln_2', ...CONV1D.slice(2)]) {
      names.push(`h.${i}.${part}.weight`);
      if (config.bias) names.push(`h.${i}.${part}.bias`);
    }
  }
  names.push('ln_f.weight');
  if (config.bias) names.push('ln_f.bias');
  return names;
}

const shapeText = (shape: readonly number[]) => `[${shape.join(', ')}]`;

/**
 * transformers' GPT-2 `tensors` (from the file `path`) as the state dict of a GPT of `config`, by
 * its names: Conv1D weights transposed, mask buffers dropped, `wpe` cropped to the block size, the
 * tied head under `lm_head.weight` when the file has it. New tensors are made for what changes;
 * the caller frees the result's tensors and the inputs. A tensor the model lacks, one it needs that
 * the file lacks, a Conv1D weight of the wrong shape or too few positions is a `UsageError` naming
 * `path` and the first such tensor, before anything is made.
 */
export function hfGpt2StateDict(
  tensors: Readonly<Record<string, Tensor>>,
  config: GPTConfig,
  path: string,
): Record<string, Tensor> {
  const fail = (detail: string) =>
    new UsageError(`--init ${path}: transformers' GPT-2 checkpoint, but ${detail}`, {
      option: '--init',
    });
  const expected = expectedNames(config);
  const wanted = new Set(expected);
  const byShort = new Map<string, Tensor>();
  for (const [name, t] of Object.entries(tensors)) {
    const key = short(name);
    if (BUFFER.test(key)) continue;
    if (!wanted.has(key) && name !== 'lm_head.weight') {
      throw fail(`the model (${config.nLayer} layers) has no tensor ${name}`);
    }
    byShort.set(name === 'lm_head.weight' ? name : key, t);
  }
  const missing = expected.find((key) => !byShort.has(key));
  if (missing !== undefined) throw fail(`it lacks ${PREFIX}${missing}`);
  for (const key of expected) {
    const t = byShort.get(key)!;
    const conv = CONV1D.find((part) => key.endsWith(`.${part}.weight`));
    if (conv === undefined) continue;
    const [nIn, nOut] = {
      'attn.c_attn': [config.nEmbd, 3 * config.nEmbd],
      'attn.c_proj': [config.nEmbd, config.nEmbd],
      'mlp.c_fc': [config.nEmbd, 4 * config.nEmbd],
      'mlp.c_proj': [4 * config.nEmbd, config.nEmbd],
    }[conv];
    if (t.rank !== 2 || t.shape[0] !== nIn || t.shape[1] !== nOut) {
      throw fail(
        `${PREFIX}${key} is ${shapeText(t.shape)} where the model's Conv1D weight is [${nIn}, ${nOut}] ([in, out])`,
      );
    }
  }
  const wpe = byShort.get('wpe.weight')!;
  if (wpe.rank !== 2 || wpe.shape[0]! < config.blockSize) {
    throw fail(
      `${PREFIX}wpe.weight is ${shapeText(wpe.shape)}: fewer positions than --block-size ${config.blockSize}`,
    );
  }
  const out: Record<string, Tensor> = {};
  for (const [key, t] of byShort) {
    const name = key === 'lm_head.weight' ? key : `${PREFIX}${key}`;
    if (CONV1D.some((part) => key.endsWith(`.${part}.weight`))) out[name] = transpose(t, 0, 1);
    else if (key === 'wpe.weight' && t.shape[0] !== config.blockSize) {
      out[name] = narrow(t, 0, 0, config.blockSize);
    } else out[name] = t;
  }
  return out;
}
