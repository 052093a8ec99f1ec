import {
  AdamW,
  type Backend,
  createCpuBackend,
  GELU,
  RandomGenerator,
  Linear,
  Module,
  mseLoss,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { FsdpConfigError, FsdpStateError, FsdpWrapError } from './errors.js';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { makeBatches, Net, SMALL, slice } from './test-support/models.js';
import { wrapNet } from './test-support/parity.js';
import { onLocalRanks, recordOps } from './test-support/ranks.js';

const ROWS = 4;

function batchFor(backend: Backend, rank: number): [Tensor, Tensor] {
  const [batch] = makeBatches(backend, SMALL, 1, 2 * ROWS);
  return slice(backend, batch!, rank * ROWS, (rank + 1) * ROWS);
}

describe('resharding after forward', () => {
  const cases = [
    { options: {}, blocksFreed: true, rootFreed: false },
    { options: { reshardAfterForward: false }, blocksFreed: false, rootFreed: false },
    { options: { disableReshardOnRoot: false }, blocksFreed: true, rootFreed: true },
  ];
  for (const { options, blocksFreed, rootFreed } of cases) {
    it(`${JSON.stringify(options)}: blocks ${blocksFreed ? '' : 'not '}freed, root ${rootFreed ? '' : 'not '}freed; all freed after backward`, async () => {
      await onLocalRanks(2, async (group, backend) => {
        const net = new Net(SMALL, backend);
        const [x, y] = batchFor(backend, group.rank);
        const model = wrapNet(net, group, options, true);
        expect(net.embed.weight.isFreed).toBe(true);
        const loss = await model.call(x, y);
        const block = net.blocks.at(0) as FullyShardedDataParallel;
        expect((block.module as unknown as { fc1: Linear }).fc1.weight.isFreed).toBe(blocksFreed);
        expect(net.embed.weight.isFreed).toBe(rootFreed);
        await loss.backward();
        expect((block.module as unknown as { fc1: Linear }).fc1.weight.isFreed).toBe(true);
        expect(net.embed.weight.isFreed).toBe(true);
        for (const unit of model.units()) expect(unit.trainingState).toBe('IDLE');
      });
    });
  }

  it('under noGrad the root frees its full parameters too (no backward will come)', async () => {
    await onLocalRanks(2, async (group, backend) => {
      const net = new Net(SMALL, backend);
      const [x, y] = batchFor(backend, group.rank);
      const model = wrapNet(net, group, { reshardAfterForward: false }, true);
      const { noGrad } = await import('@webshard/tensor-core');
      const loss = await noGrad(() => model.call(x, y));
      expect(loss.requiresGrad).toBe(false);
      expect(net.embed.weight.isFreed).toBe(true);
      expect((net.blocks.at(1) as FullyShardedDataParallel).paramGroup.isSharded).toBe(true);
    });
  });
});

describe('prefetch', () => {
  /** The collectives issued before block 0 computes, on the second iteration. */
  async function gathersBeforeFirstBlock(limitAllGathers: number): Promise<number> {
    const [count] = await onLocalRanks(2, async (group, backend) => {
      const net = new Net(SMALL, backend);
      const [x, y] = batchFor(backend, group.rank);
      const model = wrapNet(net, group, { limitAllGathers }, true);
      const first = await model.call(x, y);
      await first.backward();
      const log: string[] = [];
      recordOps(group, log);
      let atBlock0 = -1;
      const inner = (net.blocks.at(0) as FullyShardedDataParallel).module;
      inner.registerForwardPreHook(() => {
        atBlock0 = log.length;
        return undefined;
      });
      const loss = await model.call(x, y);
      await loss.backward();
      return atBlock0;
    });
    return count!;
  }

  it('issues the next unit’s all-gather before the current unit computes (limitAllGathers 1)', async () => {
    // root, block 0, and block 1 prefetched by block 0.
    expect(await gathersBeforeFirstBlock(1)).toBe(3);
  });

  it('limitAllGathers: 0 gathers each unit only when it runs', async () => {
    expect(await gathersBeforeFirstBlock(0)).toBe(2);
  });

  it('limitAllGathers: 2 prefetches two units ahead, 3 as many as there are', async () => {
    // root, block 0, and blocks 1 and 2 prefetched by block 0 ([Note: prefetching several units
    // ahead]); the net has three blocks, so a limit of 3 gathers no more.
    expect(await gathersBeforeFirstBlock(2)).toBe(4);
    expect(await gathersBeforeFirstBlock(3)).toBe(4);
  });

  /** The all-gathers a backward issues before its first reduce-scatter (every unit reduces alone). */
  async function gathersBeforeFirstReduction(limitAllGathers: number): Promise<number> {
    const [count] = await onLocalRanks(2, async (group, backend) => {
      const net = new Net(SMALL, backend);
      const [x, y] = batchFor(backend, group.rank);
      const model = wrapNet(net, group, { limitAllGathers, bucketCapMb: 0 }, true);
      const first = await model.call(x, y);
      await first.backward();
      const loss = await model.call(x, y);
      const log: string[] = [];
      recordOps(group, log);
      await loss.backward();
      return log.indexOf('reduceScatter');
    });
    return count!;
  }

  /** The most blocks with full parameters (or a gather in flight) at once in the second step. */
  async function mostBlocksGathered(limitAllGathers: number): Promise<number> {
    const [most] = await onLocalRanks(2, async (group, backend) => {
      const net = new Net(SMALL, backend);
      const [x, y] = batchFor(backend, group.rank);
      const model = wrapNet(net, group, { limitAllGathers }, true);
      const first = await model.call(x, y);
      await first.backward();
      const blocks = model.units().filter((u) => u !== model);
      let most = 0;
      const count = () => {
        const n = blocks.filter((u) => u.paramGroup.isUnshardedOrGathering).length;
        most = Math.max(most, n);
      };
      const allGather = group.allGather.bind(group);
      group.allGather = (...args: Parameters<typeof allGather>) => {
        const work = allGather(...args);
        queueMicrotask(count);
        return work;
      };
      const loss = await model.call(x, y);
      await loss.backward();
      return most;
    });
    return most!;
  }

  it('holds the computing block and at most limitAllGathers more', async () => {
    expect(await mostBlocksGathered(1)).toBe(2);
    expect(await mostBlocksGathered(2)).toBe(3);
  });

  it('backward prefetches as many units ahead as the limit allows', async () => {
    // The last block gathered again, then the blocks before it (the root kept its parameters).
    expect(await gathersBeforeFirstReduction(0)).toBe(1);
    expect(await gathersBeforeFirstReduction(1)).toBe(2);
    expect(await gathersBeforeFirstReduction(2)).toBe(3);
  });

  it('gathers each resharded unit once per backward, however many forwards fed it', async () => {
    const [log] = await onLocalRanks(2, async (group, backend) => {
      const net = new Net(SMALL, backend);
      const [x, y] = batchFor(backend, group.rank);
      const model = wrapNet(net, group, { limitAllGathers: 0, bucketCapMb: 0 }, true);
      const a = await model.call(x, y);
      const b = await model.call(x, y);
      const { add } = await import('@webshard/tensor-core');
      const loss = add(a, b);
      const ops: string[] = [];
      recordOps(group, ops);
      await loss.backward();
      return ops;
    });
    // Three blocks gathered again (the root kept its parameters), one reduce-scatter per unit.
    expect(log!.filter((op) => op === 'allGather')).toHaveLength(SMALL.depth);
    expect(log!.filter((op) => op === 'reduceScatter')).toHaveLength(SMALL.depth + 1);
  });
});

describe('reduce-scatter buckets', () => {
  async function reduceScatters(bucketCapMb: number | undefined): Promise<number> {
    const [count] = await onLocalRanks(2, async (group, backend) => {
      const net = new Net(SMALL, backend);
      const [x, y] = batchFor(backend, group.rank);
      const model = wrapNet(net, group, bucketCapMb === undefined ? {} : { bucketCapMb }, true);
      const loss = await model.call(x, y);
      const ops: string[] = [];
      recordOps(group, ops);
      await loss.backward();
      return ops.filter((op) => op === 'reduceScatter').length;
    });
    return count!;
  }

  it('small flat gradients wait in one bucket that goes at the end of backward (default 25 MiB)', async () => {
    expect(await reduceScatters(undefined)).toBe(1);
  });

  it('a bucket smaller than two gradients goes whenever the next would not fit', async () => {
    // A block's shard is 106 f32 elements (424 bytes) at world 2: one per bucket of 500 bytes.
    expect(await reduceScatters(500 / 2 ** 20)).toBe(SMALL.depth + 1);
    expect(await reduceScatters(0)).toBe(SMALL.depth + 1);
  });
});

describe('typed errors', () => {
  it('wrapping a module twice, or a unit, is FsdpWrapError', async () => {
    await onLocalRanks(1, async (group, backend) => {
      const layer = new Linear(3, 2, { backend });
      const unit = new FullyShardedDataParallel(layer, { group });
      expect(() => new FullyShardedDataParallel(layer, { group })).toThrow(FsdpWrapError);
      expect(() => new FullyShardedDataParallel(unit as never, { group })).toThrow(
        /already a FullyShardedDataParallel unit/,
      );
    });
  });

  it('a group whose size differs from worldSize is FsdpConfigError naming both', async () => {
    await onLocalRanks(2, async (group, backend) => {
      expect(
        () => new FullyShardedDataParallel(new Linear(3, 2, { backend }), { group, worldSize: 4 }),
      ).toThrow(
        new FsdpConfigError(
          'FullyShardedDataParallel',
          `worldSize is 4 but the group has 2 ranks (rank ${group.rank})`,
        ),
      );
    });
  });

  it('forward inside summonFullParams is FsdpStateError naming the unit and state', async () => {
    await onLocalRanks(2, async (group, backend) => {
      const net = new Net(SMALL, backend);
      const [x, y] = batchFor(backend, group.rank);
      const model = wrapNet(net, group, {}, true);
      const first = await model.call(x, y);
      await first.backward();
      const error = await model
        .summonFullParams(() => model.call(x, y))
        .then(
          () => null,
          (e: unknown) => e,
        );
      expect(error).toBeInstanceOf(FsdpStateError);
      expect((error as FsdpStateError).message).toBe(
        `[forward] unit '<root>' rank ${group.rank}: forward is not allowed inside summonFullParams (state SUMMON_FULL_PARAMS, expected IDLE)`,
      );
      for (const unit of model.units()) expect(unit.trainingState).toBe('IDLE');
    });
  });

  it('a parameter used inside a nested unit and outside it is FsdpWrapError naming it', async () => {
    await onLocalRanks(1, async (group, backend) => {
      const config = { inFeatures: 8, width: 8, hidden: 8, depth: 1, outFeatures: 8 };
      const net = new Net(config, backend);
      const shared = net.embed.weight;
      const block = net.blocks.at(0) as unknown as { fc1: Linear };
      block.fc1.weight = shared;
      net.setBlock(0, new FullyShardedDataParallel(net.blocks.at(0), { group }));
      expect(() => new FullyShardedDataParallel(net, { group })).toThrow(
        /parameter 'embed.weight' is used both inside the nested unit wrapping Block and outside it/,
      );
    });
  });

  it('stateDict outside summonFullParams is FsdpStateError', async () => {
    await onLocalRanks(1, async (group, backend) => {
      const model = new FullyShardedDataParallel(new Linear(3, 2, { backend }), { group });
      expect(() => model.stateDict()).toThrow(FsdpStateError);
      const keys = await model.summonFullParams(() => [...model.stateDict().keys()]);
      expect(keys).toEqual(['weight', 'bias']);
    });
  });
});

class WithGelu extends Module<[Tensor, Tensor], Promise<Tensor>> {
  readonly a: Linear;
  readonly b: Linear;
  constructor(
    backend: Backend,
    readonly act: Module<[Tensor], unknown>,
  ) {
    super();
    this.a = this.registerModule(
      'a',
      new Linear(3, 4, { backend, generator: new RandomGenerator(3) }),
    );
    this.registerModule('act', act);
    this.b = this.registerModule(
      'b',
      new Linear(4, 2, { backend, generator: new RandomGenerator(4) }),
    );
  }
  async forward(x: Tensor, y: Tensor): Promise<Tensor> {
    const h = (await this.act.call(this.a.call(x))) as Tensor;
    return mseLoss(this.b.call(h), y);
  }
}

describe('a unit with no parameters', () => {
  it('trains like the plain module (test_fsdp_no_params)', async () => {
    const x = [
      [0.1, 0.2, 0.3],
      [0.3, -0.1, 0.5],
    ];
    const y = [
      [1, 0],
      [0, 1],
    ];
    const backend = createCpuBackend();
    const plain = new WithGelu(backend, new GELU());
    const optimizer = new AdamW(plain.parameters(), { lr: 0.1 });
    const loss = await plain.call(tensor(x, { backend }), tensor(y, { backend }));
    await loss.backward();
    optimizer.step();
    const expected = await Promise.all(plain.parameters().map((p) => p.read()));
    const results = await onLocalRanks(2, async (group, rankBackend) => {
      const act = new FullyShardedDataParallel(new GELU(), { group });
      const model = new FullyShardedDataParallel(new WithGelu(rankBackend, act), { group });
      expect(act.flatParameters).toHaveLength(0);
      const opt = new AdamW(model.parameters(), { lr: 0.1 });
      const l = await model.call(
        tensor([x[group.rank]!], { backend: rankBackend }),
        tensor([y[group.rank]!], { backend: rankBackend }),
      );
      await l.backward();
      opt.step();
      return model.summonFullParams(() =>
        Promise.all(model.namedParameters().map(([, p]) => p.read())),
      );
    });
    for (const result of results) {
      result.forEach((values, i) => {
        const want = expected[i]!;
        for (let j = 0; j < want.length; j++) expect(values[j]).toBeCloseTo(want[j]!, 6);
      });
    }
  });
});

describe('the optimizer', () => {
  it('built over the original parameters instead of the shards is an ArgumentError naming one', async () => {
    await onLocalRanks(1, async (group, backend) => {
      const net = new Net(SMALL, backend);
      const originals = net.parameters();
      wrapNet(net, group, {}, true);
      expect(() => new AdamW(originals)).toThrow(
        "[AdamW] parameter embed.weight is sharded by a FullyShardedDataParallel unit: build the optimizer over the unit's parameters() (its flat shards)",
      );
    });
  });
});

describe('one rank ([Note: one rank])', () => {
  it('issues no collective and copies no parameter: the gathered buffer is the shard', async () => {
    const [result] = await onLocalRanks(1, async (group, backend) => {
      const net = new Net(SMALL, backend);
      const [x, y] = batchFor(backend, 0);
      const model = wrapNet(net, group, {}, true);
      const ops: string[] = [];
      recordOps(group, ops);
      const root = model as FullyShardedDataParallel;
      const shard = root.flatParameters[0]!.shard;
      let sharesStorage = false;
      net.registerForwardPreHook(() => {
        const param = root.flatParameters[0]!.entries[0]!.param;
        sharesStorage = param.storage() === shard.storage();
        return undefined;
      });
      const loss = await model.call(x, y);
      await loss.backward();
      return { ops, sharesStorage, grad: shard.grad !== null };
    });
    expect(result!.ops).toEqual([]);
    expect(result!.sharesStorage).toBe(true);
    expect(result!.grad).toBe(true);
  });

  it('under mixed precision still casts: the compute copy is gathered as at any world size', async () => {
    const [ops] = await onLocalRanks(1, async (group, backend) => {
      const net = new Net(SMALL, backend);
      const [x, y] = batchFor(backend, 0);
      const model = wrapNet(net, group, { mixedPrecision: true }, true);
      const log: string[] = [];
      recordOps(group, log);
      const loss = await model.call(x, y);
      await loss.backward();
      return log;
    });
    expect(ops!.filter((op) => op === 'allGather').length).toBeGreaterThan(0);
  });
});

describe('a rank lost mid-forward', () => {
  it('fails the forward, and the prefetched gather it leaves behind is no unhandled rejection', async () => {
    const unhandled: unknown[] = [];
    const record = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', record);
    try {
      await onLocalRanks(2, async (group, backend) => {
        const net = new Net(SMALL, backend);
        const [x, y] = batchFor(backend, group.rank);
        const model = wrapNet(net, group, {}, true);
        // One step records the forward order, so the next forward prefetches.
        await (await model.call(x, y)).backward();
        if (group.rank === 1) {
          group.abort('rank 1 left');
          return;
        }
        await expect(model.call(x, y)).rejects.toMatchObject({ name: 'GroupAbortedError' });
      });
      await new Promise((resolve) => setTimeout(resolve, 50));
    } finally {
      process.off('unhandledRejection', record);
    }
    expect(unhandled).toEqual([]);
  });
});
