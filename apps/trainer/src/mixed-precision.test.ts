import {
  AdamW,
  cast,
  GPT,
  GradScaler,
  MixedPrecision,
  type Module,
  type Tensor,
} from '@webshard/tensor-core';
import { describeBackends } from '@webshard/tensor-core/testing';
import { expect, it } from 'vitest';
import { MLP } from './models/mlp.js';
import {
  batchAt,
  gptConfigOf,
  loadFixture,
  maxRelativeGap,
  type Reference,
  readReference,
} from './test-support/fixtures.js';
import { decayGroups, mixedPrecisionStep } from './train-step.js';

/**
 * [Note: mixed-precision tolerances]
 * The runs keep f32 masters and compute in 16 bits (f16 with a GradScaler at PyTorch's defaults,
 * bf16 without), and are compared with PyTorch's plain f32 run, so the gap is the 16-bit rounding
 * of weights, activations and gradients, expressed in the format's unit roundoff u (half an ulp at
 * 1): u = 2^-11 = 4.9e-4 for f16 (11 significant bits), u = 2^-8 = 3.9e-3 for bf16 (8 bits).
 * Measured maximum relative loss gap over the 20 steps (cpu / webgpu):
 *   MLP  f16 2.2e-4 / 2.4e-4 (0.5u)    bf16 4.2e-3 / 4.2e-3 (1.1u)
 *   GPT  f16 1.6e-5 / 1.2e-5 (0.03u)   bf16 1.3e-4 / 1.9e-4 (0.05u)
 * About one rounding of the MLP's output reaches its MSE loss (a squared difference of nearly
 * equal numbers, which keeps relative errors whole). The GPT's loss is a cross entropy near
 * ln(64) whose gradient per logit is about 1/64, so rounding in the logits mostly cancels before
 * it reaches the loss. Tolerances: 3u for the MLP and u/4 for the GPT, 2.8x to 7.8x above the
 * measured gaps. They still catch a broken step: the losses fall 9 % (GPT) and 20 % (MLP) over
 * the 20 steps, so compute copies that never received the updated masters would miss by
 * hundreds of times the tolerance, and the one f16 step the scaler skipped when the MLP's loss was computed in f16
 * (before it followed autocast's f32 loss) moved the losses by 14 %.
 */
const UNIT_ROUNDOFF = { f16: 2 ** -11, bf16: 2 ** -8 } as const;
const TOLERANCE = {
  mlp: (dtype: 'f16' | 'bf16') => 3 * UNIT_ROUNDOFF[dtype],
  gpt: (dtype: 'f16' | 'bf16') => UNIT_ROUNDOFF[dtype] / 4,
};

async function runMixed(
  model: Module,
  dtype: 'f16' | 'bf16',
  reference: Reference,
  loss: (step: number) => Tensor,
): Promise<{ losses: number[]; skipped: number }> {
  const mixed = new MixedPrecision(model, { computeDType: dtype });
  const { lr, betas, eps, weight_decay: weightDecay, clip } = reference.optimizer;
  const optimizer = new AdamW(decayGroups(mixed.masterParams(), weightDecay), { lr, betas, eps });
  const scaler = new GradScaler({ enabled: dtype === 'f16' });
  const losses: number[] = [];
  let skipped = 0;
  for (let step = 0; step < reference.steps; step++) {
    const result = await mixedPrecisionStep(mixed, optimizer, scaler, () => loss(step), { clip });
    losses.push(result.loss);
    if (!result.stepped) skipped++;
  }
  return { losses, skipped };
}

for (const dtype of ['f16', 'bf16'] as const) {
  describeBackends(`MLP in ${dtype} mixed precision against PyTorch's f32 run`, (ctx) => {
    it('stays within the tolerance at every step', async () => {
      const reference = await readReference('mlp');
      const { weights, batches } = await loadFixture('mlp', ctx.backend);
      const model = new MLP({ nIn: 16, nHidden: 32, nOut: 8 }, { backend: ctx.backend });
      await model.loadStateDict(weights);
      const x = cast(batches.x!, dtype);
      const y = batches.y!;
      const { losses, skipped } = await runMixed(model, dtype, reference, (step) =>
        model.loss(batchAt(x, step), batchAt(y, step)),
      );
      expect(skipped).toBe(0);
      expect(maxRelativeGap(losses, reference.losses)).toBeLessThan(TOLERANCE.mlp(dtype));
    });
  });

  describeBackends(`GPT in ${dtype} mixed precision against PyTorch's f32 run`, (ctx) => {
    it('stays within the tolerance at every step', async () => {
      const reference = await readReference('gpt');
      const { weights, batches } = await loadFixture('gpt', ctx.backend);
      const model = new GPT(gptConfigOf(reference), { backend: ctx.backend });
      await model.loadStateDict(weights);
      const { losses, skipped } = await runMixed(model, dtype, reference, (step) => {
        const out = model.call(batchAt(batches.idx!, step), batchAt(batches.targets!, step));
        out.logits.free();
        return out.loss!;
      });
      expect(skipped).toBe(0);
      expect(maxRelativeGap(losses, reference.losses)).toBeLessThan(TOLERANCE.gpt(dtype));
    });
  });
}
