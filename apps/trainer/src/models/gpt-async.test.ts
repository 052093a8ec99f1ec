import {
  AdamW,
  type Backend,
  backward,
  clipGradNorm,
  GPT,
  type Tensor,
} from '@webshard/tensor-core';
import { describeBackends } from '@webshard/tensor-core/testing';
import { expect, it } from 'vitest';
import {
  batchAt,
  gptConfigOf,
  loadFixture,
  maxRelativeGap,
  readReference,
} from '../test-support/fixtures.js';
import { decayGroups } from '../train-step.js';

type Path = 'sync' | 'async';

/** The PyTorch GPT fixture trained `steps` steps, its loss built by `forward` or `forwardAsync`. */
async function train(backend: Backend, path: Path, steps: number) {
  const reference = await readReference('gpt');
  const { weights, batches } = await loadFixture('gpt', backend);
  const model = new GPT(gptConfigOf(reference), { backend });
  await model.loadStateDict(weights);
  const { lr, betas, eps, weight_decay: weightDecay, clip } = reference.optimizer;
  const optimizer = new AdamW(decayGroups(model, weightDecay), { lr, betas, eps });
  const params = model.parameters();
  const losses: number[] = [];
  const grads: number[][] = [];
  for (let step = 0; step < steps; step++) {
    const idx = batchAt(batches.idx!, step);
    const targets = batchAt(batches.targets!, step);
    const out: { logits: Tensor; loss: Tensor | null } =
      path === 'sync' ? model.forward(idx, targets) : await model.forwardAsync(idx, targets);
    out.logits.free();
    const loss = out.loss!;
    await backward(loss);
    losses.push(await loss.item());
    loss.free();
    grads.push(Array.from(await params[1]!.grad!.read()));
    await clipGradNorm(params, clip);
    optimizer.step();
    optimizer.zeroGrad();
  }
  return { losses, grads, reference };
}

describeBackends('GPT.forwardAsync', (ctx) => {
  it('gives the same losses and gradients as forward, bit for bit, and matches PyTorch', async () => {
    const sync = await train(ctx.backend, 'sync', 4);
    const run = await train(ctx.backend, 'async', 4);
    expect(run.losses).toEqual(sync.losses);
    expect(run.grads).toEqual(sync.grads);
    expect(maxRelativeGap(run.losses, sync.reference.losses.slice(0, 4))).toBeLessThan(1e-5);
  });

  it('refuses ids longer than the block size before running a block', async () => {
    const reference = await readReference('gpt');
    const { batches } = await loadFixture('gpt', ctx.backend);
    const idx = batchAt(batches.idx!, 0);
    const small = new GPT(
      { ...gptConfigOf(reference), blockSize: idx.shape[1]! - 1 },
      {
        backend: ctx.backend,
      },
    );
    await expect(small.forwardAsync(idx)).rejects.toThrow(/expected ids \[B, T\] with T <=/);
  });
});
