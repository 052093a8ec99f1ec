import {
  add,
  arange,
  type Dropout,
  type Embedding,
  type GPT,
  type GPTBlock,
  type LayerNorm,
  type Linear,
  Module,
  type Tensor,
  tidy,
} from '@webshard/tensor-core';
import type { MLP } from './mlp.js';

/** One layer of a model run layer by layer: one tensor in, one out (`OffloadModel`'s `Layer`). */
export type Layer = Module<[Tensor], Tensor>;

/** The GPT's input: token plus position embeddings, then dropout (its `embed`, as a layer). */
class GptEmbed extends Module<[Tensor], Tensor> {
  constructor(
    readonly wte: Embedding,
    readonly wpe: Embedding,
    readonly drop: Dropout,
  ) {
    super();
    this.registerModule('wte', wte);
    this.registerModule('wpe', wpe);
    this.registerModule('drop', drop);
  }

  forward(idx: Tensor): Tensor {
    return tidy(() => {
      const pos = arange(idx.shape[1]!, undefined, 1, { backend: idx.backend });
      return this.drop.call(add(this.wte.call(idx), this.wpe.call(pos)));
    });
  }
}

/** The GPT's output: `ln_f`, then `lm_head` (tied to `wte`): the logits [B, T, vocab]. */
class GptHead extends Module<[Tensor], Tensor> {
  constructor(
    readonly lnF: LayerNorm,
    readonly lmHead: Linear,
  ) {
    super();
    this.registerModule('ln_f', lnF);
    this.registerModule('lm_head', lmHead);
  }

  forward(x: Tensor): Tensor {
    return tidy(() => this.lmHead.call(this.lnF.call(x)));
  }
}

/**
 * A model as consecutive layers over its own modules (the same parameters, in place), for
 * `OffloadModel`: the GPT as its embedding, its blocks and its head, the logits out (the loss is
 * the caller's, as in `GPT.forward`, so the numbers are the same ops in the same order); the MLP as
 * `fc1`, GELU, `fc2`. The GPT's embedding and head share `wte.weight`.
 */
export function layersOf(model: GPT | MLP): Layer[] {
  if ('blocks' in model) {
    return [
      new GptEmbed(model.wte, model.wpe, model.drop),
      ...(model.blocks as Iterable<GPTBlock>),
      new GptHead(model.lnF, model.lmHead),
    ];
  }
  return [model.fc1, model.gelu, model.fc2];
}
