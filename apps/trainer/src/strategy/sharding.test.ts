import { describe, expect, it } from 'vitest';
import { UsageError } from '../errors.js';
import { runMain } from '../test-support/cli.js';
import { FIXTURES, maxRelativeGap, readCliFixture } from '../test-support/fixtures.js';
import { parseSharding, shardCount, shardingOptions } from './sharding.js';

describe('--sharding', () => {
  it("takes the trainer's names and PyTorch's", () => {
    expect(parseSharding(undefined, undefined)).toEqual({
      sharding: 'full',
      reshardAfterForward: true,
    });
    expect(parseSharding('grad-op', undefined)).toEqual({
      sharding: 'grad-op',
      reshardAfterForward: false,
    });
    expect(parseSharding('HYBRID_SHARD', 'false')).toEqual({
      sharding: 'hybrid',
      reshardAfterForward: false,
    });
    expect(parseSharding('NO_SHARD', undefined).sharding).toBe('none');
    // The old spelling of grad-op.
    expect(parseSharding(undefined, 'false').sharding).toBe('grad-op');
  });

  it('refuses a contradiction or an unknown name, naming the flags', () => {
    const refuses = (
      sharding: string | undefined,
      reshard: string | undefined,
      message: string,
    ) => {
      expect(() => parseSharding(sharding, reshard)).toThrow(UsageError);
      expect(() => parseSharding(sharding, reshard)).toThrow(message);
    };
    refuses(
      'grad-op',
      'true',
      '--sharding grad-op contradicts --reshard-after-forward true: grad-op keeps the full parameters after forward, full frees them, none never shards',
    );
    refuses('full', 'false', '--sharding full contradicts --reshard-after-forward false');
    refuses('none', 'true', '--sharding none contradicts --reshard-after-forward true');
    refuses(
      'zero3',
      undefined,
      '--sharding zero3 is not one of full, grad-op, hybrid, none (or FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, NO_SHARD)',
    );
  });

  it("maps to FSDP's options, the node size from the launcher", () => {
    expect(shardingOptions('none', true, 4, {})).toEqual({ shardingStrategy: 'NO_SHARD' });
    expect(shardingOptions('grad-op', false, 4, {})).toEqual({
      shardingStrategy: 'SHARD_GRAD_OP',
      reshardAfterForward: false,
    });
    expect(shardingOptions('hybrid', true, 4, { LOCAL_WORLD_SIZE: '2' })).toEqual({
      shardingStrategy: 'HYBRID_SHARD',
      reshardAfterForward: true,
      nodeSize: 2,
    });
    // Ranks the trainer starts itself are one node.
    expect(shardingOptions('hybrid', true, 4, {}).nodeSize).toBe(4);
    // What the memory estimate divides the model states by.
    expect(shardCount('full', 4, { LOCAL_WORLD_SIZE: '2' })).toBe(4);
    expect(shardCount('hybrid', 4, { LOCAL_WORLD_SIZE: '2' })).toBe(2);
    expect(shardCount('none', 4, {})).toBe(1);
  });
});

describe('--sharding trains like PyTorch (the strategies fixture, 20 steps)', () => {
  const rows: [string, string[], Record<string, string>][] = [
    ['hybrid, 2 nodes of 2 local ranks', ['--sharding', 'hybrid'], { LOCAL_WORLD_SIZE: '2' }],
    ['none', ['--sharding', 'none'], {}],
    ['grad-op', ['--sharding', 'SHARD_GRAD_OP'], {}],
  ];
  for (const [name, flags, env] of rows) {
    it(name, async () => {
      const fixture = await readCliFixture();
      const saved = process.env.LOCAL_WORLD_SIZE;
      Object.assign(process.env, env);
      try {
        const ranks = ['--strategy', 'fsdp', '--world-size', '4', '--transport', 'local'];
        const run = await runMain(
          [...fixture.flags, '--backend', 'cpu', ...ranks, ...flags],
          FIXTURES,
        );
        expect(run.stderr).toBe('');
        expect(run.exitCode).toBe(0);
        const losses = run.summary!.records.map((r) => r.loss);
        expect(maxRelativeGap(losses, fixture.losses)).toBeLessThan(1e-5);
      } finally {
        if (saved === undefined) delete process.env.LOCAL_WORLD_SIZE;
        else process.env.LOCAL_WORLD_SIZE = saved;
      }
    });
  }
});
