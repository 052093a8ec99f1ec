import { AdamW, GPTBlock } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { gatherFullOptimStateDict, loadFullOptimStateDict } from './optim-state.js';
import { fullStateDict, loadFullStateDict } from './state-dict.js';
import { Gpt, TINY_GPT, tokenBatches, tokenSlice } from './test-support/gpt.js';
import { onLocalRanks } from './test-support/ranks.js';
import { autoWrap, moduleClassAutoWrapPolicy } from './wrap.js';

const BATCH = 8;

async function snapshot(state: Awaited<ReturnType<typeof gatherFullOptimStateDict>>) {
  const out: Record<string, Record<string, unknown>> = {};
  for (const [name, s] of Object.entries(state!.state)) {
    out[name] = {};
    for (const [k, v] of Object.entries(s)) {
      out[name]![k] = v !== null && typeof v === 'object' ? [...(await v.read())] : v;
    }
  }
  return { state: out, groups: state!.param_groups };
}

/** Train `steps` at `world` ranks, optionally starting from a saved model and optimizer state. */
async function train(
  world: number,
  steps: number,
  offset: number,
  from?: {
    model: Map<string, import('@webshard/tensor-core').Tensor>;
    optim: NonNullable<Awaited<ReturnType<typeof gatherFullOptimStateDict>>>;
  },
) {
  return onLocalRanks(world, async (group, backend) => {
    const model = autoWrap(new Gpt(TINY_GPT, backend), moduleClassAutoWrapPolicy([GPTBlock]), {
      group,
    });
    const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
    if (from) {
      await loadFullStateDict(model, from.model);
      await loadFullOptimStateDict(model, optimizer, from.optim);
    }
    const losses: number[] = [];
    const per = BATCH / world;
    const batches = tokenBatches(TINY_GPT, offset + steps, BATCH).slice(offset);
    for (const rows of batches) {
      const [x, y] = tokenSlice(backend, rows, group.rank * per, (group.rank + 1) * per);
      const loss = await model.call(x, y);
      losses.push(await loss.item());
      await loss.backward();
      optimizer.step();
      optimizer.zeroGrad();
    }
    const fullModel = await fullStateDict(model);
    const optim = await gatherFullOptimStateDict(model, optimizer, { rank0Only: false });
    return { losses, model: fullModel, optim: optim! };
  });
}

const mean = (xs: number[][], s: number) => xs.reduce((n, l) => n + l[s]!, 0) / xs.length;

describe('optimizer state across world sizes', () => {
  it('gathered at N and sharded at M gives the same moments bit for bit, and training continues with the same losses', async () => {
    for (const n of [1, 2, 4]) {
      const saved = (await train(n, 2, 0))[0]!;
      const expected = await snapshot(saved.optim);
      expect(Object.keys(expected.state)).toContain('transformer.wte.weight');
      expect(expected.state['transformer.wte.weight']!.step).toBe(2);
      for (const m of [1, 2, 4]) {
        const resumed = await train(m, 2, 2, saved);
        const uninterrupted = await train(m, 4, 0);
        for (let s = 0; s < 2; s++) {
          const a = mean(
            resumed.map((r) => r.losses),
            s,
          );
          const b = mean(
            uninterrupted.map((r) => r.losses),
            s + 2,
          );
          expect(
            Math.abs(a - b),
            `saved at ${n}, resumed at ${m}, step ${s + 2}`,
          ).toBeLessThanOrEqual(1e-6 * b);
        }
      }
      // The moments round-trip exactly: load at 2, gather again.
      const [again] = await onLocalRanks(2, async (group, backend) => {
        const model = autoWrap(new Gpt(TINY_GPT, backend), moduleClassAutoWrapPolicy([GPTBlock]), {
          group,
        });
        const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
        await loadFullOptimStateDict(model, optimizer, saved.optim);
        return snapshot(await gatherFullOptimStateDict(model, optimizer, { rank0Only: false }));
      });
      expect(again).toEqual(expected);
    }
  });
});
