import { AdamW, Linear, RandomGenerator } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { DiLoCo } from './diloco.js';
import { backend } from './test-support/mlp-case.js';
import { clock } from './test-support/sub-group-ops.js';
import { closeWorld, createShapedWorld } from './test-support/worlds.js';

// `DiLoCo.create` broadcasts rank 0's parameters, then every rank leaves together. A broadcast
// above the direct-exchange size goes down the ring and frees each rank when its copy is in, a
// hop apart; left so, the first outer sync (a streamed fragment's, inside the overlap) waited
// out that spread: on broadband-20 the trainer's GPT reached its fourth rank 0.6 s after its
// second.

describe('DiLoCo.create', () => {
  it('every rank leaves it within a hop of the others, though the broadcast reaches them a hop apart (4 ranks, tcp, broadband-20)', async () => {
    const groups = await createShapedWorld(4, 'broadband-20');
    // 256 x 512 + 512 parameters: 526 KB, above the direct broadcast's 256 KiB, so down the ring,
    // each hop some 210 ms of 20 Mbit/s and 40 ms of latency.
    const layers = groups.map(
      () => new Linear(256, 512, { backend, generator: new RandomGenerator(1) }),
    );
    const left = await Promise.all(
      groups.map(async (group, r) => {
        const params = layers[r]!.parameters();
        await DiLoCo.create(params, new AdamW(params), { group, innerSteps: 4 });
        return clock();
      }),
    );
    const spread = Math.max(...left) - Math.min(...left);
    // The ring frees rank 3 about two hops (some 500 ms) after rank 1; the barrier, one latency.
    expect(spread).toBeLessThan(200);
    await closeWorld(groups);
  }, 60_000);
});
