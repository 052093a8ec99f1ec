import { createLocalGroups } from '@webshard/collectives';
import { createCpuBackend } from '@webshard/tensor-core';
import { afterEach, describe, expect, expectTypeOf, it, vi } from 'vitest';
import { type FsdpOptions, resolveOptions } from './api.js';
import { FsdpConfigError } from './errors.js';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { type OPTION_NAMES, resetOptionWarnings } from './option-names.js';
import { Net, SMALL } from './test-support/models.js';
import { trainRank, trainSingle } from './test-support/parity.js';
import { onLocalRanks } from './test-support/ranks.js';

afterEach(() => {
  resetOptionWarnings();
  vi.restoreAllMocks();
});

describe('option names are checked', () => {
  it('lists every option of FsdpOptions', () => {
    expectTypeOf<(typeof OPTION_NAMES)[number]>().toEqualTypeOf<keyof FsdpOptions>();
  });

  const cases: [string, string][] = [
    ['mixed_precision', 'mixedPrecision'],
    ['reshard_after_forward', 'reshardAfterForward'],
    ['reshardAfterFoward', 'reshardAfterForward'],
    ['bucket_cap_mb', 'bucketCapMb'],
    ['flatten_params', 'flattenParameters'],
    ['process_group', 'group'],
    ['cpu_offload', 'moveParamsToCpu'],
    ['cpuOfload', 'moveParamsToCpu'],
    ['limitAllgather', 'limitAllGathers'],
  ];
  for (const [given, nearest] of cases) {
    it(`'${given}' is an error naming '${nearest}', before the module is touched`, async () => {
      await onLocalRanks(1, async (group, backend) => {
        const net = new Net(SMALL, backend);
        const make = () =>
          new FullyShardedDataParallel(net, { group, [given]: true } as unknown as FsdpOptions);
        expect(make).toThrow(FsdpConfigError);
        expect(make).toThrow(
          `[FullyShardedDataParallel] unknown option '${given}': did you mean '${nearest}'?`,
        );
        expect(net.embed.weight.isFreed).toBe(false);
      });
    });
  }
});

describe('cpuOffload, the deprecated name of moveParamsToCpu (fairscale)', () => {
  it('sets moveParamsToCpu and moveGradsToCpu, with one DeprecationWarning per process', () => {
    const [group] = createLocalGroups(1);
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    const first = resolveOptions({ group: group!, cpuOffload: true });
    resolveOptions({ group: group!, cpuOffload: true });
    expect(first.moveParamsToCpu).toBe(true);
    expect(first.moveGradsToCpu).toBe(true);
    expect(resolveOptions({ group: group!, cpuOffload: false }).moveParamsToCpu).toBe(false);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(warn.mock.calls[0]![0]).toBe(
      "FullyShardedDataParallel's cpuOffload is deprecated: use moveParamsToCpu",
    );
    expect(warn.mock.calls[0]![1]).toEqual({
      type: 'DeprecationWarning',
      code: 'WEBSHARD_FSDP_CPU_OFFLOAD',
    });
  });

  it('refuses cpuOffload and moveParamsToCpu that disagree', () => {
    const [group] = createLocalGroups(1);
    expect(() =>
      resolveOptions({ group: group!, cpuOffload: true, moveParamsToCpu: false }),
    ).toThrow(
      new FsdpConfigError(
        'FullyShardedDataParallel',
        'cpuOffload (true) is the deprecated name of moveParamsToCpu (false): give only moveParamsToCpu',
      ),
    );
  });

  it('keeps the shards on the host and trains like one process, at 2 ranks', async () => {
    vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    const run = { steps: 2, batch: 8, nested: true };
    const reference = await trainSingle(run);
    const results = await onLocalRanks(2, async (group, host) => {
      const device = createCpuBackend();
      return trainRank(group, host, run, { cpuOffload: true, computeBackend: device });
    });
    for (const r of results) {
      for (const [name, values] of reference.params) {
        const got = r.params.get(name)!;
        for (let i = 0; i < values.length; i++) {
          expect(Math.abs(got[i]! - values[i]!), name).toBeLessThanOrEqual(1e-5);
        }
      }
    }
    // With the shards on the host the module's parameters live on the compute backend.
    await onLocalRanks(1, async (group, host) => {
      const device = createCpuBackend();
      const net = new Net(SMALL, host);
      const model = new FullyShardedDataParallel(net, {
        group,
        cpuOffload: true,
        computeBackend: device,
      });
      for (const shard of model.parameters()) expect(shard.backend).toBe(host);
      expect(net.embed.weight.backend).toBe(device);
    });
  });
});
