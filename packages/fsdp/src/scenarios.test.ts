// Scenarios transcribed from fairscale's FSDP tests (test_fsdp_*.py): each trains with FSDP on
// several local ranks and compares with single-process training, or checks the schedule directly.
import { describe, expect, it } from 'vitest';
import {
  add,
  type Backend,
  RandomGenerator,
  Linear,
  type Module,
  narrow,
} from '@webshard/tensor-core';

function makeUnused(backend: Backend): Linear {
  return new Linear(3, 2, { backend, generator: new RandomGenerator(5) });
}
import {
  type CustomRun,
  customLocal,
  customSingle,
  meanLosses,
  type StepBody,
  trainLocal,
  trainSingle,
} from './test-support/parity.js';

function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, rtol = 1e-5): void {
  expect(actual.length).toBe(expected.length);
  for (let i = 0; i < expected.length; i++) {
    const tol = rtol * Math.max(1, Math.abs(expected[i]!));
    if (!(Math.abs(actual[i]! - expected[i]!) <= tol)) {
      throw new Error(`element ${i}: ${actual[i]} vs ${expected[i]} (tolerance ${tol})`);
    }
  }
}

const RUN = { steps: 3, batch: 8, nested: true };

describe('fairscale scenarios', () => {
  it('shared weights: the head tied to the embedding, trained once (test_fsdp_shared_weights)', async () => {
    const config = { inFeatures: 8, width: 8, hidden: 12, depth: 2, outFeatures: 8, tied: true };
    const reference = await trainSingle({ ...RUN, config });
    expect(reference.params.has('head.weight')).toBe(false);
    const results = await trainLocal(2, { ...RUN, config });
    expectClose(meanLosses(results), reference.losses);
    for (const [name, values] of reference.params)
      expectClose(results[0]!.params.get(name)!, values);
  });

  it('checkpointed activations inside a unit (test_fsdp_checkpoint)', async () => {
    const config = {
      inFeatures: 5,
      width: 8,
      hidden: 12,
      depth: 3,
      outFeatures: 3,
      checkpoint: true,
    };
    const reference = await trainSingle({ ...RUN, config });
    const plain = await trainSingle(RUN);
    expectClose(reference.losses, plain.losses);
    for (const world of [2, 4]) {
      const results = await trainLocal(world, { ...RUN, config });
      expectClose(meanLosses(results), reference.losses);
      for (const [name, values] of reference.params) {
        expectClose(results[world - 1]!.params.get(name)!, values);
      }
    }
  });
});

/** Loss of the first and second half of the rows, summed, backpropagated once. */
const twoForwardsOneBackward: StepBody = async (model, x, y) => {
  const n = x.shape[0]! / 2;
  const [xa, xb] = [narrow(x, 0, 0, n), narrow(x, 0, n, n)];
  const [ya, yb] = [narrow(y, 0, 0, n), narrow(y, 0, n, n)];
  const la = await model.call(xa, ya);
  const lb = await model.call(xb, yb);
  const loss = add(la, lb);
  const value = await loss.item();
  await loss.backward();
  for (const t of [xa, xb, ya, yb, la, lb, loss]) t.free();
  return value;
};

/** Two forwards, then two backwards, gradients accumulating (forward-forward-backward-backward). */
const forwardForwardBackwardBackward: StepBody = async (model, x, y) => {
  const n = x.shape[0]! / 2;
  const [xa, xb] = [narrow(x, 0, 0, n), narrow(x, 0, n, n)];
  const [ya, yb] = [narrow(y, 0, 0, n), narrow(y, 0, n, n)];
  const la = await model.call(xa, ya);
  const lb = await model.call(xb, yb);
  const value = (await la.item()) + (await lb.item());
  await la.backward();
  await lb.backward();
  for (const t of [xa, xb, ya, yb, la, lb]) t.free();
  return value;
};

const plain: StepBody = async (model, x, y) => {
  const loss = await model.call(x, y);
  const value = await loss.item();
  await loss.backward();
  loss.free();
  return value;
};

describe('fairscale scenarios with their own step', () => {
  const cases: [string, CustomRun][] = [
    [
      'multiple forwards before one backward (test_fsdp_multiple_forward)',
      { ...RUN, body: twoForwardsOneBackward },
    ],
    [
      'forward, forward, backward, backward (test_fsdp_fwd_fwd_bwd_bwd)',
      { ...RUN, body: forwardForwardBackwardBackward },
    ],
    [
      'frozen weights: the embedding frozen before wrapping (test_fsdp_freezing_weights)',
      { ...RUN, body: plain, prepare: (net) => (net.embed.weight.requiresGrad = false) },
    ],
    [
      // Without weight decay: a flat shard holds the unused weight's zero gradient, so AdamW
      // would decay it where single-process AdamW skips a parameter without gradient (as in
      // fairscale, whose flat parameters do the same).
      'a parameter that gets no gradient, outside and inside a nested unit (test_fsdp_unused_params)',
      {
        ...RUN,
        body: plain,
        weightDecay: 0,
        prepare: (net) => {
          const backend = net.embed.weight.backend;
          net.registerModule('unused', makeUnused(backend));
          (net.blocks.at(0) as unknown as Module).registerModule('unused', makeUnused(backend));
        },
      },
    ],
  ];
  for (const [title, run] of cases) {
    for (const world of [2, 4]) {
      it(`${title}, world ${world}`, async () => {
        const reference = await customSingle(run);
        const results = await customLocal(world, run);
        expectClose(meanLosses(results), reference.losses);
        for (const [name, values] of reference.params) {
          expectClose(results[0]!.params.get(name)!, values);
        }
      });
    }
  }
});
