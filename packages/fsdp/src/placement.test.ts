import { type Backend, createCpuBackend, createWebGpuBackend } from '@webshard/tensor-core';
import { webGpuTestsEnabled } from '@webshard/tensor-core/testing';
import { describe, expect, it } from 'vitest';
import { FsdpWrapError } from './errors.js';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { Net, SMALL } from './test-support/models.js';
import { type ParityResult, trainRank, trainSingle, wrapNet } from './test-support/parity.js';
import { onLocalRanks } from './test-support/ranks.js';

const RUN = { steps: 3, batch: 8, nested: true };

function maxRelative(actual: ArrayLike<number>, expected: ArrayLike<number>): number {
  let worst = 0;
  for (let i = 0; i < expected.length; i++) {
    worst = Math.max(
      worst,
      Math.abs(actual[i]! - expected[i]!) / Math.max(1, Math.abs(expected[i]!)),
    );
  }
  return worst;
}

function expectParity(results: ParityResult[], reference: ParityResult, rtol: number): void {
  const losses = reference.losses.map(
    (_, s) => results.reduce((n, r) => n + r.losses[s]!, 0) / results.length,
  );
  expect(maxRelative(losses, reference.losses)).toBeLessThanOrEqual(rtol);
  for (const r of results) {
    for (const [name, values] of reference.params) {
      expect(maxRelative(r.params.get(name)!, values), name).toBeLessThanOrEqual(rtol);
    }
  }
}

describe('moveParamsToCpu: shards on the host, compute on another backend', () => {
  it('keeps shards, their gradients and AdamW state on the host and trains like one process', async () => {
    const reference = await trainSingle(RUN);
    const results = await onLocalRanks(2, async (group, host) => {
      const device = createCpuBackend();
      const result = await trainRank(group, host, RUN, {
        moveParamsToCpu: true,
        computeBackend: device,
      });
      return result;
    });
    expectParity(results, reference, 1e-5);
  });

  it('places the shard on the host and the module’s parameters on the compute backend', async () => {
    await onLocalRanks(2, async (group, host) => {
      const device = createCpuBackend();
      const net = new Net(SMALL, host);
      const model = wrapNet(net, group, { moveParamsToCpu: true, computeBackend: device }, true);
      for (const shard of model.parameters()) expect(shard.backend).toBe(host);
      expect(net.embed.weight.backend).toBe(device);
      expect(net.embed.weight.isFreed).toBe(true);
    });
  });

  it('refuses parameters that are not on the CPU backend', async () => {
    if (!webGpuTestsEnabled()) return;
    const gpu = await createWebGpuBackend();
    await onLocalRanks(1, async (group) => {
      expect(
        () => new FullyShardedDataParallel(new Net(SMALL, gpu), { group, moveParamsToCpu: true }),
      ).toThrow(FsdpWrapError);
    });
  });
});

describe.runIf(webGpuTestsEnabled())('FSDP computing on WebGPU', () => {
  let gpus: Backend[] = [];
  it('all on WebGPU, and shards on the host with compute on WebGPU, train like one process', async () => {
    gpus = await Promise.all([0, 1, 2].map(() => createWebGpuBackend()));
    const reference = await trainSingle(RUN, gpus[2]!);
    const onDevice = await onLocalRanks(2, (group) => trainRank(group, gpus[group.rank]!, RUN, {}));
    // The same kernels on every rank; only the batch split differs from the reference.
    expectParity(onDevice, reference, 1e-5);
    const offloaded = await onLocalRanks(2, (group, host) =>
      trainRank(group, host, RUN, { moveParamsToCpu: true, computeBackend: gpus[group.rank]! }),
    );
    // AdamW runs on the CPU backend here and on WebGPU in the reference.
    expectParity(offloaded, reference, 1e-5);
  });
});
