import {
  createCpuBackend,
  Linear,
  mean,
  RandomGenerator,
  randn,
  relu,
  Sequential,
  type Tensor,
} from '@webshard/tensor-core';
import { createLocalGroups } from '@webshard/collectives';
import { afterAll, describe, expect, it } from 'vitest';
import type { TrainConfig } from '../config.js';
import { turnsInBackward } from './backward-turns.js';
import { prepareDiloco } from './diloco.js';
import type { PreparedModel } from './prepared-model.js';

// [Note: turns of the event loop in backward]: a timer due 5 ms into a backward of a few hundred
// milliseconds fires inside it with the turns, and only after it without them; the gradients are
// the same bits either way.
const backend = createCpuBackend({ matmulThreads: 1 });
afterAll(() => backend.dispose());

const LAYERS = 16;
const WIDTH = 384;

function model(): Sequential {
  const generator = new RandomGenerator(11);
  const layers = [];
  for (let i = 0; i < LAYERS; i++) layers.push(new Linear(WIDTH, WIDTH, { backend, generator }));
  return new Sequential(...layers);
}

/** One backward's gradients, when a 5 ms timer set before it fired and when it ended (ms). */
async function backward(net: Sequential, x: Tensor) {
  let h = x;
  for (const layer of net.children()) h = relu((layer as Linear).call(h));
  const loss = mean(h);
  let fired = Number.NaN;
  const start = performance.now();
  setTimeout(() => {
    fired = performance.now() - start;
  }, 5);
  await loss.backward();
  const ended = performance.now() - start;
  // The timer had its turn by now at the latest.
  await new Promise((resolve) => setTimeout(resolve, 10));
  const grads = await Promise.all(
    net.parameters().map(async (p) => Float32Array.from((await p.grad!.read()) as Float32Array)),
  );
  return { grads, fired, ended };
}

describe('turnsInBackward', () => {
  it('runs a timer inside a long backward, with the same gradients as without', async () => {
    // 512 rows: about 160 ms of backward on a fast 2-core machine (256 rows took 81-86 ms there).
    const x = randn([512, WIDTH], { backend, generator: new RandomGenerator(3) });
    const plainNet = model();
    const plain = await backward(plainNet, x);
    const turningNet = model();
    const turns = turnsInBackward(turningNet.parameters(), 20);
    const turning = await backward(turningNet, x);
    turns.remove();
    console.log(
      `backward ${plain.ended.toFixed(0)} ms: the 5 ms timer at ${plain.fired.toFixed(0)} ms without turns, at ${turning.fired.toFixed(0)} ms with (backward ${turning.ended.toFixed(0)} ms, ${turns.turns} turns)`,
    );
    // A backward long enough to need turns, whose timer waited for its end without them.
    expect(plain.ended).toBeGreaterThan(100);
    expect(plain.fired).toBeGreaterThanOrEqual(plain.ended);
    // Inside the backward, not after it. (Not "in its first half": a node that a loaded machine
    // stretches past the turn's 20 ms moves the first turn late: the suite beside a WebGPU bench
    // on 2 cores once fired the timer at 57 ms of a 111 ms backward.)
    expect(turning.fired).toBeLessThan(turning.ended);
    expect(turns.turns).toBeGreaterThan(1);
    expect(turning.grads).toEqual(plain.grads);
  });

  it('gives no turn in a backward shorter than everyMs, and none once removed', async () => {
    const net = model();
    let now = 0;
    const turns = turnsInBackward(net.parameters(), 50, () => now);
    const x = randn([4, WIDTH], { backend, generator: new RandomGenerator(5) });
    await backward(net, x);
    expect(turns.turns).toBe(0);
    now = 1000;
    await backward(net, x);
    expect(turns.turns).toBe(1);
    turns.remove();
    now = 5000;
    await backward(net, x);
    expect(turns.turns).toBe(1);
  });
});

describe('the diloco strategy', () => {
  it('gives the event loop turns in backward on a group whose communication runs on the thread, until released', async () => {
    const [group] = createLocalGroups(1);
    const net = model();
    const config = {
      steps: 10,
      innerSteps: 5,
      outerFragments: 1,
      outerOverlap: 0,
      elastic: null,
    } as unknown as TrainConfig;
    const base = { params: net.parameters() } as unknown as Omit<
      PreparedModel,
      'step' | 'start' | 'afterStep'
    >;
    const prepared = prepareDiloco(base, config, group!);
    // 512 rows: about 160 ms of backward on a fast 2-core machine (256 rows took 81-86 ms there).
    const x = randn([512, WIDTH], { backend, generator: new RandomGenerator(3) });
    const turning = await backward(net, x);
    expect(turning.fired).toBeLessThan(turning.ended);
    prepared.release!();
    const plain = await backward(net, x);
    expect(plain.fired).toBeGreaterThanOrEqual(plain.ended);
  });
});
