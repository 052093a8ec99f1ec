// fairscale's extra_repr and verbose: `String(model)` is the module tree with each unit's settings
// (it was `[object Object]`).
import { describe, expect, it } from 'vitest';
import { Net, SMALL } from './test-support/models.js';
import { wrapNet } from './test-support/parity.js';
import { onLocalRanks } from './test-support/ranks.js';

describe('toString and extraRepr', () => {
  for (const world of [2, 4]) {
    it(`prints the module tree with each unit's world size, flattening and precision, world ${world}`, async () => {
      await onLocalRanks(world, async (group, backend) => {
        const model = wrapNet(new Net(SMALL, backend), group, { mixedPrecision: true }, true);
        const unit = `FullyShardedDataParallel(worldSize=${world}, flattenParameters=true, mixedPrecision=true)`;
        const block = (i: number) => [
          `      (${i}): ${unit}`,
          '        (_fsdp_wrapped_module): Block',
          '          (fc1): Linear',
          '          (fc2): Linear',
        ];
        expect(String(model)).toBe(
          [
            unit,
            '  (_fsdp_wrapped_module): Net',
            '    (embed): Linear',
            '    (blocks): ModuleList',
            ...block(0),
            ...block(1),
            ...block(2),
            '    (head): Linear',
          ].join('\n'),
        );
      });
    });
  }

  it('with verbose, every option, the rank and whether the unit is the root', async () => {
    await onLocalRanks(2, async (group, backend) => {
      const model = wrapNet(
        new Net(SMALL, backend),
        group,
        { verbose: true, bucketCapMb: 0 },
        false,
      );
      expect(model.extraRepr()).toBe(
        `rank=${group.rank}, isRoot=false, worldSize=2, flattenParameters=true, mixedPrecision=false, reshardAfterForward=true, disableReshardOnRoot=true, computeDtype=f32, bufferDtype=f32, fp32ReduceScatter=false, computeBackend=the parameters', moveParamsToCpu=false, moveGradsToCpu=false, bucketCapMb=0, forceInputToFp32=false, clearAutocastCache=false, limitAllGathers=1, gradientPredivideFactor=2`,
      );
    });
  });
});
