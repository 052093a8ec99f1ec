// fairscale's process_group_reduce_scatter: the gradients' reduce-scatters go on a second group
// over the same ranks (test_fsdp.py passes it in every config), with the same training, at 2 and
// 4 local ranks against one process.
import { createLocalGroups } from '@webshard/collectives';
import { createCpuBackend } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { resolveOptions } from './api.js';
import { FsdpConfigError } from './errors.js';
import { trainRank, trainSingle } from './test-support/parity.js';
import { recordOps } from './test-support/ranks.js';

const RUN = { steps: 2, batch: 8, nested: true };

describe('processGroupReduceScatter', () => {
  for (const world of [2, 4]) {
    it(`every reduce-scatter goes on the second group, none on the first, training unchanged, world ${world}`, async () => {
      const reference = await trainSingle(RUN);
      const main = createLocalGroups(world, { timeoutMs: 20_000 });
      const second = createLocalGroups(world, { timeoutMs: 20_000 });
      try {
        const logs = main.map(() => ({ main: [] as string[], second: [] as string[] }));
        main.forEach((g, r) => {
          recordOps(g, logs[r]!.main);
          recordOps(second[r]!, logs[r]!.second);
        });
        const results = await Promise.all(
          main.map((g, r) =>
            trainRank(g, createCpuBackend(), RUN, {
              processGroupReduceScatter: second[r]!,
              bucketCapMb: 0,
            }),
          ),
        );
        for (const log of logs) {
          expect(log.main.filter((op) => op === 'reduceScatter')).toEqual([]);
          expect(log.main.filter((op) => op === 'allGather').length).toBeGreaterThan(0);
          // Four units, two steps, each reduced once a step.
          expect(log.second).toEqual(Array(8).fill('reduceScatter'));
        }
        for (const r of results) {
          for (const [name, values] of reference.params) {
            const got = r.params.get(name)!;
            for (let i = 0; i < values.length; i++) {
              expect(Math.abs(got[i]! - values[i]!), name).toBeLessThanOrEqual(1e-5);
            }
          }
        }
      } finally {
        await Promise.all([...main, ...second].map((g) => g.close()));
      }
    });
  }

  it('refuses a group of another size or rank', async () => {
    const one = createLocalGroups(2);
    const a0 = one[0];
    const three = createLocalGroups(3);
    expect(() => resolveOptions({ group: a0!, processGroupReduceScatter: three[0]! })).toThrow(
      new FsdpConfigError(
        'FullyShardedDataParallel',
        'processGroupReduceScatter is rank 0 of 3, group rank 0 of 2: it must hold the same ranks',
      ),
    );
    const two = createLocalGroups(2);
    expect(() => resolveOptions({ group: a0!, processGroupReduceScatter: two[1]! })).toThrow(
      'processGroupReduceScatter is rank 1 of 2, group rank 0 of 2: it must hold the same ranks',
    );
    await Promise.all([...one, ...three, ...two].map((g) => g.close()));
  });
});
