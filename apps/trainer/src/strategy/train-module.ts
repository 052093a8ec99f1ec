import { GPT, type GPTOutput, Module, type Tensor } from '@webshard/tensor-core';
import type { MLP } from '../models/mlp.js';

/** What one forward gives the loop: the loss (given targets) and, for the GPT, the logits. */
export type TrainOutput = {
  logits: Tensor | null;
  loss: Tensor | null;
};

/**
 * [Note: the module a strategy wraps]
 * The GPT's `forward` is synchronous (it runs in one `tidy`), but a block wrapped by FSDP returns a
 * promise, so a wrapper must drive `forwardAsync` instead. `TrainModule` is that async forward over
 * the same children under the same names (`transformer`, `lm_head`; `fc1`, `fc2` for the MLP): a
 * wrapper around it sees the model's parameters under their PyTorch names, wrapping a block
 * replaces it inside the model's own `ModuleList` (so `forwardAsync` runs the wrapped block), and a
 * state dict taken through it needs no renaming. For the MLP, the forward is its loss.
 */
export class TrainModule extends Module<[Tensor, (Tensor | null)?], Promise<TrainOutput>> {
  constructor(readonly model: GPT | MLP) {
    super();
    for (const [name, child] of model.namedChildren()) this.registerModule(name, child);
    const own = model.parameters({ recurse: false });
    if (own.length > 0) {
      throw new Error(`TrainModule: ${model.typeName} holds parameters outside its children`);
    }
  }

  async forward(input: Tensor, target: Tensor | null = null): Promise<TrainOutput> {
    if (this.model instanceof GPT)
      return (await this.model.forwardAsync(input, target)) as GPTOutput;
    if (target === null) return { logits: this.model.call(input), loss: null };
    return { logits: null, loss: this.model.loss(input, target) };
  }
}
