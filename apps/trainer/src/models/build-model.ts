import {
  type Backend,
  GPT,
  type Module,
  RandomGenerator,
  StateDictError,
  type Tensor,
} from '@webshard/tensor-core';
import { SafetensorsError } from '@webshard/tensor-core/io';
import { loadSafetensors } from '@webshard/tensor-core/node';
import { UsageError } from '../errors.js';
import { hfGpt2StateDict, isHfGpt2 } from './hf-gpt2.js';
import { MLP } from './mlp.js';
import type { TrainConfig } from '../config.js';

/** The MLP's input and output widths (its hidden width is `--n-embd`). */
export const MLP_IN = 16;
export const MLP_OUT = 8;

/** The model a config asks for, seeded (nanoGPT's init for the GPT, PyTorch's for the MLP). */
export function buildModel(config: TrainConfig, vocabSize: number, backend: Backend): GPT | MLP {
  const generator = new RandomGenerator(config.seed);
  if (config.model === 'mlp') {
    return new MLP({ nIn: MLP_IN, nHidden: config.nEmbd, nOut: MLP_OUT }, { backend, generator });
  }
  return new GPT(
    {
      vocabSize,
      blockSize: config.blockSize,
      nLayer: config.nLayer,
      nHead: config.nHead,
      nEmbd: config.nEmbd,
      dropout: 0,
      bias: true,
    },
    { backend, generator },
  );
}

const TIED = ['transformer.wte.weight', 'lm_head.weight'] as const;

/** The GELU a file's `config` metadata (what `--save` writes) says the GPT computed with. */
function savedGelu(metadata: Readonly<Record<string, string>>): 'none' | 'tanh' | null {
  try {
    const config = JSON.parse(metadata.config ?? '{}') as { geluApproximate?: unknown };
    return config.geluApproximate === 'tanh' || config.geluApproximate === 'none'
      ? config.geluApproximate
      : null;
  } catch {
    return null;
  }
}

/**
 * Load `--init` weights by PyTorch names into `model`, or for the GPT a checkpoint of transformers'
 * GPT-2 ([Note: transformers' GPT-2 checkpoints]). The GPT's tied embedding may be stored
 * once under either name (`torch.save` of a state dict stores it under both; safetensors' own
 * `save_model` keeps one); stored under both, the two must be equal. Any problem (a malformed
 * file, missing or unexpected keys, a shape that does not fit) is a `UsageError`, and the model
 * is left as it was.
 */
export async function loadInitialWeights(
  model: Module,
  path: string,
  option: '--init' | '--resume' = '--init',
): Promise<void> {
  let tensors: Record<string, Tensor>;
  let metadata: Readonly<Record<string, string>>;
  try {
    ({ tensors, metadata } = await loadSafetensors(path, {
      backend: model.parameters()[0]!.backend,
    }));
  } catch (error) {
    if (SafetensorsError.isInstance(error)) {
      throw new UsageError(`${option} ${path} is not a valid safetensors file: ${error.reason}`, {
        option,
        cause: error,
      });
    }
    throw error;
  }
  const loaded = new Set(Object.values(tensors));
  let gelu: 'none' | 'tanh' | null = null;
  try {
    if (model instanceof GPT) {
      gelu = savedGelu(metadata);
      if (isHfGpt2(tensors)) {
        tensors = hfGpt2StateDict(tensors, model.config, path);
        gelu = 'tanh';
      }
      const [wte, head] = TIED.map((k) => tensors[k]);
      if (wte !== undefined && head !== undefined) {
        const [a, b] = await Promise.all([wte.read(), head.read()]);
        if (a.length !== b.length || a.some((x, i) => x !== b[i])) {
          throw new UsageError(
            `${option} ${path}: transformer.wte.weight and lm_head.weight differ, but the model ties them`,
            { option },
          );
        }
      }
      const tied = wte ?? head;
      if (tied !== undefined) {
        tensors[TIED[0]] = tied;
        tensors[TIED[1]] = tied;
      }
    }
    await model.loadStateDict(tensors);
    if (model instanceof GPT && gelu !== null) model.setGeluApproximate(gelu);
  } catch (error) {
    if (StateDictError.isInstance(error)) {
      throw new UsageError(`${option} ${path} does not fit the model: ${error.message}`, {
        option,
        cause: error,
      });
    }
    throw error;
  } finally {
    for (const t of new Set([...loaded, ...Object.values(tensors)])) t.free();
  }
}
