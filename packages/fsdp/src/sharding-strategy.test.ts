import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalGroups, type ProcessGroup } from '@webshard/collectives';
import { AdamW, createCpuBackend, type Tensor } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import type { FsdpOptions } from './api.js';
import {
  loadShardedCheckpoint,
  readCheckpoint,
  saveShardedCheckpoint,
} from './checkpoint/sharded-checkpoint.js';
import { FsdpConfigError } from './errors.js';
import { fullStateDict, loadFullStateDict } from './state-dict.js';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { makeBatches, Net, SMALL, slice } from './test-support/models.js';
import { meanLosses, trainLocal, trainSingle, wrapNet } from './test-support/parity.js';
import { recordOps } from './test-support/ranks.js';

function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, rtol: number): void {
  expect(actual.length).toBe(expected.length);
  for (let i = 0; i < expected.length; i++) {
    const tol = rtol * Math.max(1, Math.abs(expected[i]!));
    if (!(Math.abs(actual[i]! - expected[i]!) <= tol)) {
      throw new Error(`element ${i}: ${actual[i]} vs ${expected[i]} (tolerance ${tol})`);
    }
  }
}

// 12 rows divide among 1, 2, 3, 4 and 6 ranks.
const RUN = { steps: 3, batch: 12, nested: true };

describe('sharding strategies keep single-process parity (local transport)', () => {
  const cases: [string, number, Omit<FsdpOptions, 'group'>][] = [
    ['HYBRID_SHARD 2 nodes x 2', 4, { shardingStrategy: 'HYBRID_SHARD', nodeSize: 2 }],
    ['HYBRID_SHARD 3 nodes x 2', 6, { shardingStrategy: 'HYBRID_SHARD', nodeSize: 2 }],
    [
      'HYBRID_SHARD 2 x 2, no buckets',
      4,
      { shardingStrategy: 'HYBRID_SHARD', nodeSize: 2, bucketCapMb: 0 },
    ],
    ['HYBRID_SHARD 2 nodes x 3', 6, { shardingStrategy: 'HYBRID_SHARD', nodeSize: 3 }],
    ['SHARD_GRAD_OP world 2', 2, { shardingStrategy: 'SHARD_GRAD_OP' }],
    ['NO_SHARD world 3', 3, { shardingStrategy: 'NO_SHARD' }],
    ['FULL_SHARD world 4', 4, { shardingStrategy: 'FULL_SHARD' }],
  ];
  for (const [title, world, options] of cases) {
    it(title, async () => {
      const reference = await trainSingle(RUN);
      const results = await trainLocal(world, RUN, options);
      expectClose(meanLosses(results), reference.losses, 1e-5);
      for (const result of results) {
        for (const [name, values] of reference.params) {
          expectClose(result.params.get(name)!, values, 1e-5);
        }
      }
    });
  }
});

/** Wrap the test net on every rank of a local world with `options`; each rank's root unit. */
function wrapAll(
  groups: ProcessGroup[],
  options: Omit<FsdpOptions, 'group'>,
  backend = createCpuBackend(),
): ReturnType<typeof wrapNet>[] {
  return groups.map((g) => wrapNet(new Net(SMALL, backend, 0), g, options, true));
}

describe('the groups each strategy communicates over', () => {
  it('HYBRID_SHARD shards over the node and replicates over ranks of the same local index', async () => {
    const groups = createLocalGroups(6, { timeoutMs: 10_000 });
    try {
      const roots = wrapAll(groups, { shardingStrategy: 'HYBRID_SHARD', nodeSize: 3 });
      for (const [r, root] of roots.entries()) {
        expect(root.options.group.ranks).toEqual(r < 3 ? [0, 1, 2] : [3, 4, 5]);
        expect(root.options.replicateGroup?.ranks).toEqual([r % 3, (r % 3) + 3]);
        // Every unit of the tree shares the two sub-groups.
        for (const unit of root.units()) {
          expect(unit.options.group).toBe(root.options.group);
          expect(unit.options.replicateGroup).toBe(root.options.replicateGroup);
        }
        // The world's mean: 6 = pre * post.
        expect(root.gradientDivideFactors.pre * root.gradientDivideFactors.post).toBe(6);
      }
    } finally {
      await Promise.all(groups.map((g) => g.close()));
    }
  });

  it('HYBRID_SHARD on one node, and NO_SHARD on one rank, keep the group itself', async () => {
    const groups = createLocalGroups(2, { timeoutMs: 10_000 });
    const single = createLocalGroups(1);
    try {
      const [root] = wrapAll(groups, { shardingStrategy: 'HYBRID_SHARD', nodeSize: 2 });
      expect(root!.options.group).toBe(groups[0]);
      expect(root!.options.replicateGroup).toBeNull();
      const [alone] = wrapAll(single, { shardingStrategy: 'NO_SHARD' });
      expect(alone!.options.group).toBe(single[0]);
    } finally {
      await Promise.all([...groups, ...single].map((g) => g.close()));
    }
  });

  it('NO_SHARD gathers nothing and all-reduces gradients; SHARD_GRAD_OP gathers once a step', async () => {
    const counts = async (
      world: number,
      options: Omit<FsdpOptions, 'group'>,
    ): Promise<Record<string, number>> => {
      const groups = createLocalGroups(world, { timeoutMs: 10_000 });
      try {
        const backend = createCpuBackend();
        const roots = wrapAll(groups, options, backend);
        const log: string[] = [];
        const root = roots[0]!;
        recordOps(root.options.group, log);
        if (root.options.replicateGroup !== null) recordOps(root.options.replicateGroup, log);
        const [batch] = makeBatches(backend, SMALL, 1, 2 * world);
        await Promise.all(
          roots.map(async (model, r) => {
            const [x, y] = slice(backend, batch!, 2 * r, 2 * r + 2);
            const loss = await model.call(x, y);
            await loss.backward();
          }),
        );
        const out: Record<string, number> = {};
        for (const op of log) out[op] = (out[op] ?? 0) + 1;
        return out;
      } finally {
        await Promise.all(groups.map((g) => g.close()));
      }
    };
    // 4 units (the root and 3 blocks), each with one flat parameter; buckets off.
    const full = await counts(2, { shardingStrategy: 'FULL_SHARD', bucketCapMb: 0 });
    expect(full.allGather).toBe(4 + 3); // forward, then backward for all but the root
    const gradOp = await counts(2, { shardingStrategy: 'SHARD_GRAD_OP', bucketCapMb: 0 });
    expect(gradOp.allGather).toBe(4);
    const none = await counts(3, { shardingStrategy: 'NO_SHARD', bucketCapMb: 0 });
    expect(none.allGather).toBeUndefined();
    expect(none.allReduce).toBe(4);
  });
});

describe('sharding strategy options that contradict each other', () => {
  const groups = createLocalGroups(4);
  const net = (): Net => new Net(SMALL, createCpuBackend(), 0);
  const fails = (options: Omit<FsdpOptions, 'group'>, message: string): void => {
    const wrap = (): unknown =>
      new FullyShardedDataParallel(net(), { ...options, group: groups[1]! });
    expect(wrap).toThrow(FsdpConfigError);
    expect(wrap).toThrow(message);
  };

  it('names the strategy, the option and the rank', () => {
    fails(
      { shardingStrategy: 'SHARD_GRAD_OP', reshardAfterForward: true },
      "[FullyShardedDataParallel] shardingStrategy 'SHARD_GRAD_OP' keeps the full parameters after forward: reshardAfterForward true is FULL_SHARD (rank 1 of 4)",
    );
    fails(
      { shardingStrategy: 'FULL_SHARD', reshardAfterForward: false },
      "shardingStrategy 'FULL_SHARD' reshards after forward: reshardAfterForward false is SHARD_GRAD_OP (rank 1 of 4)",
    );
    fails(
      { shardingStrategy: 'NO_SHARD', reshardAfterForward: false },
      "shardingStrategy 'NO_SHARD' never frees the parameters: reshardAfterForward does not apply (rank 1 of 4)",
    );
    fails(
      { shardingStrategy: 'HYBRID_SHARD', nodeSize: 3 },
      "shardingStrategy 'HYBRID_SHARD' needs a node size that divides the group's 4 ranks, got 3 (rank 1 of 4)",
    );
    fails(
      { shardingStrategy: 'FULL_SHARD', nodeSize: 2 },
      "nodeSize (2) needs shardingStrategy 'HYBRID_SHARD', got 'FULL_SHARD' (rank 1 of 4)",
    );
    fails(
      { shardingStrategy: 'HYBRID_SHARD', nodeSize: 2, processGroupReduceScatter: groups[1]! },
      "shardingStrategy 'HYBRID_SHARD' reduce-scatters on its own sub-groups: processGroupReduceScatter does not apply (rank 1 of 4)",
    );
    fails(
      { shardingStrategy: 'ZERO_3' as never },
      "shardingStrategy must be one of FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, NO_SHARD, got 'ZERO_3' (rank 1 of 4)",
    );
  });

  it('HYBRID_SHARD without a node size names where it is read from', () => {
    const saved = process.env.LOCAL_WORLD_SIZE;
    delete process.env.LOCAL_WORLD_SIZE;
    try {
      fails(
        { shardingStrategy: 'HYBRID_SHARD' },
        "shardingStrategy 'HYBRID_SHARD' needs the ranks per node: pass nodeSize, or start the ranks with webshard-run (LOCAL_WORLD_SIZE) (rank 1 of 4)",
      );
    } finally {
      if (saved !== undefined) process.env.LOCAL_WORLD_SIZE = saved;
    }
  });
});

describe('a hybrid checkpoint resumes at another node count', () => {
  /**
   * Steps `from`..`to` of the 4-step run at `world` ranks in nodes of `nodeSize`, starting from
   * the checkpoint in `load` when given, saving to `save` when given; rank 0's parameters.
   */
  async function phase(
    world: number,
    options: Omit<FsdpOptions, 'group'>,
    from: number,
    to: number,
    dirs: { load?: string; save?: string },
  ): Promise<{ losses: number[]; params: Map<string, Float32Array>[] }> {
    const groups = createLocalGroups(world, { timeoutMs: 20_000 });
    const batch = 12;
    try {
      const results = await Promise.all(
        groups.map(async (group) => {
          const backend = createCpuBackend();
          const model = wrapNet(new Net(SMALL, backend, 0), group, options, true);
          const optimizer = new AdamW(model.parameters(), { lr: 0.01, weightDecay: 0.01 });
          if (dirs.load) await loadShardedCheckpoint(dirs.load, { model, optimizer });
          const rows = batch / world;
          const losses: number[] = [];
          for (const b of makeBatches(backend, SMALL, to, batch).slice(from)) {
            const [x, y] = slice(backend, b, group.rank * rows, (group.rank + 1) * rows);
            const loss = await model.call(x, y);
            losses.push(await loss.item());
            await loss.backward();
            optimizer.step();
            optimizer.zeroGrad();
          }
          if (dirs.save) await saveShardedCheckpoint(dirs.save, { model, optimizer, step: to });
          const params = new Map<string, Float32Array>();
          await model.summonFullParams(async () => {
            for (const [name, p] of model.namedParameters())
              params.set(name, (await p.read()) as Float32Array);
          });
          return { losses, params };
        }),
      );
      return {
        losses: meanLosses(results.map((r) => ({ ...r }))),
        params: results.map((r) => r.params),
      };
    } finally {
      await Promise.all(groups.map((g) => g.close()));
    }
  }

  const hybrid = (nodeSize: number): Omit<FsdpOptions, 'group'> => ({
    shardingStrategy: 'HYBRID_SHARD',
    nodeSize,
  });
  const resumes: [string, number, Omit<FsdpOptions, 'group'>][] = [
    ['3 nodes x 2', 6, hybrid(2)],
    ['1 node x 2', 2, hybrid(2)],
    ['2 nodes x 3', 6, hybrid(3)],
    ['FULL_SHARD on 4 ranks', 4, { shardingStrategy: 'FULL_SHARD' }],
  ];
  for (const [title, world, options] of resumes) {
    it(`saved at 2 nodes x 2, resumed at ${title}: the single-process run's losses and weights`, async () => {
      const dir = await mkdtemp(join(tmpdir(), 'fsdp-hybrid-'));
      try {
        const reference = await trainSingle({ steps: 4, batch: 12 });
        const first = await phase(4, hybrid(2), 0, 2, { save: dir });
        // One replica: node 0's two ranks wrote it.
        expect((await readdir(dir)).filter((f) => f.endsWith('.safetensors'))).toHaveLength(2);
        expect((await readCheckpoint(dir)).manifest.worldSize).toBe(2);
        const second = await phase(world, options, 2, 4, { load: dir });
        expectClose([...first.losses, ...second.losses], reference.losses, 1e-5);
        for (const params of second.params) {
          for (const [name, values] of reference.params) {
            expectClose(params.get(name)!, values, 1e-5);
          }
        }
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });
  }
});

describe('full state dicts of a hybrid model', () => {
  it('hold the trained weights on world rank 0 only (rank0Only) and load at another node count', async () => {
    const reference = await trainSingle({ steps: 2, batch: 12 });
    // Train at 2 nodes x 2 and take the full state dict.
    const trained = createLocalGroups(4, { timeoutMs: 20_000 });
    const saved = new Map<string, Float32Array>();
    let full = new Map<string, Tensor>();
    try {
      const backend = createCpuBackend();
      const roots = wrapAll(trained, { shardingStrategy: 'HYBRID_SHARD', nodeSize: 2 }, backend);
      const optimizers = roots.map(
        (m) => new AdamW(m.parameters(), { lr: 0.01, weightDecay: 0.01 }),
      );
      for (const batch of makeBatches(backend, SMALL, 2, 12)) {
        await Promise.all(
          roots.map(async (model, r) => {
            const [x, y] = slice(backend, batch, 3 * r, 3 * r + 3);
            const loss = await model.call(x, y);
            await loss.backward();
            optimizers[r]!.step();
            optimizers[r]!.zeroGrad();
          }),
        );
      }
      const dicts = await Promise.all(roots.map((m) => fullStateDict(m, { rank0Only: true })));
      // Node 1's local rank 0 is no world rank 0.
      expect(dicts.map((d) => d.size > 0)).toEqual([true, false, false, false]);
      full = dicts[0]!;
      for (const [name, t] of full) saved.set(name, (await t.read()) as Float32Array);
    } finally {
      await Promise.all(trained.map((g) => g.close()));
    }
    for (const [name, values] of reference.params) expectClose(saved.get(name)!, values, 1e-5);
    // Load it at 3 nodes x 2: every rank gathers the same full weights back.
    const loading = createLocalGroups(6, { timeoutMs: 20_000 });
    try {
      const backend = createCpuBackend();
      const roots = wrapAll(loading, { shardingStrategy: 'HYBRID_SHARD', nodeSize: 2 }, backend);
      await Promise.all(roots.map((m) => loadFullStateDict(m, full)));
      const back = await Promise.all(roots.map((m) => fullStateDict(m)));
      for (const d of back) {
        for (const [name, values] of saved)
          expectClose((await d.get(name)!.read()) as Float32Array, values, 0);
      }
    } finally {
      await Promise.all(loading.map((g) => g.close()));
    }
  });
});
