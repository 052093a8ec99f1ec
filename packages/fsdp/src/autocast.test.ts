// FSDP inside tensor-core's `autocast`, as fairscale's FSDP runs inside `torch.autocast`: a unit's
// forward awaits its all-gathers, and the scope follows each rank's call chain across them (two
// ranks share this thread). Nested units on 2 ranks train as one process under the same scope.
import { autocast } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { type CustomRun, customLocal, customSingle, meanLosses } from './test-support/parity.js';

function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, rtol: number): void {
  expect(actual.length).toBe(expected.length);
  for (let i = 0; i < expected.length; i++) {
    const tol = rtol * Math.max(1, Math.abs(expected[i]!));
    if (!(Math.abs(actual[i]! - expected[i]!) <= tol)) {
      throw new Error(`element ${i}: ${actual[i]} vs ${expected[i]} (tolerance ${tol})`);
    }
  }
}

describe('FSDP under autocast', () => {
  for (const clearAutocastCache of [false, true]) {
    it(`trains nested units in bf16 as one process does, clearAutocastCache ${clearAutocastCache}`, async () => {
      const run: CustomRun = {
        steps: 3,
        batch: 8,
        nested: true,
        body: async (model, x, y) => {
          const loss = await autocast({ dtype: 'bf16' }, async () => {
            const l = await model.call(x, y);
            expect(l.dtype).toBe('f32');
            return l;
          });
          const value = await loss.item();
          await loss.backward();
          loss.free();
          return value;
        },
      };
      const reference = await customSingle(run);
      const results = await customLocal(2, run, { clearAutocastCache });
      // Before any step the forward is the same bf16 products row by row: the losses agree as
      // in f32. A weight's gradient, though, is a bf16 product summed over the rows: over a
      // rank's half of them, then reduced in f32, against all of them at once in one process. The
      // two differ by bf16 roundings, and AdamW's first steps move a weight by about lr whatever
      // its gradient's size (a near-zero one rounded to the other sign moves it the other way), so
      // after a step the losses agree within bf16's rounding and the weights are not compared.
      const losses = meanLosses(results);
      expectClose(losses.slice(0, 1), reference.losses.slice(0, 1), 1e-5);
      expectClose(losses, reference.losses, 5e-3);
      expect(reference.losses.at(-1)!).toBeLessThan(reference.losses[0]!);
      // The scope reached the units' forwards: the f32 run's first loss is further from FSDP's
      // than the tolerance above.
      const f32 = await customSingle({
        ...run,
        body: async (model, x, y) => {
          const loss = await model.call(x, y);
          const value = await loss.item();
          await loss.backward();
          loss.free();
          return value;
        },
      });
      expect(Math.abs(losses[0]! - f32.losses[0]!)).toBeGreaterThan(
        1e-5 * Math.max(1, f32.losses[0]!),
      );
      expectClose(f32.losses, reference.losses, 2e-2);
    });
  }
});
