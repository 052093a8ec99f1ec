import { ArgumentError } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import type { StoreClient } from '../rendezvous/store-client.js';
import { agreedLink } from './link-shaper.js';
import { NodeTopology, type RankPlace } from './topology.js';

const place = (node: string, localRank: number, localSize = 2): RankPlace => ({
  node,
  localRank,
  localSize,
  host: `host-${node}`,
});

describe('NodeTopology', () => {
  it('numbers nodes by their lowest rank and ranks by local rank, whatever the global order', () => {
    const topology = new NodeTopology([place('b', 1), place('a', 0), place('b', 0), place('a', 1)]);
    expect(topology.nodes).toEqual([
      [2, 0],
      [1, 3],
    ]);
    expect([0, 1, 2, 3].map((r) => [topology.nodeOf(r), topology.localRankOf(r)])).toEqual([
      [0, 1],
      [1, 0],
      [0, 0],
      [1, 1],
    ]);
    expect(topology.rankOf(1, 1)).toBe(3);
    expect(topology.localSize).toBe(2);
    expect(new NodeTopology([place('a', 0, 1), place('b', 0, 2), place('b', 1, 2)]).localSize).toBe(
      null,
    );
  });

  it('refuses two ranks with one local rank, and a node with ranks missing', () => {
    expect(() => new NodeTopology([place('a', 0), place('a', 0)])).toThrow(
      "[initProcessGroup] ranks 0 and 1 both say they are local rank 0 of node 'host-a'",
    );
    expect(() => new NodeTopology([place('a', 0), place('b', 0), place('b', 1)])).toThrow(
      "[initProcessGroup] node 'host-a' has 2 local ranks, but ranks [0] joined for it",
    );
  });
});

describe('agreedLink', () => {
  const store = () => {
    const values = new Map<string, string>();
    return {
      set: async (key: string, value: string) => void values.set(key, value),
      get: async (key: string) => values.get(key)!,
    } as unknown as StoreClient;
  };

  it("uses rank 0's settings where they are the same, and names both where they differ", async () => {
    const shared = store();
    expect(await agreedLink(shared, 0, 'latency=1ms', 1000)).toEqual({ latencyMs: 1 });
    expect(await agreedLink(shared, 1, { latencyMs: 1 }, 1000)).toEqual({ latencyMs: 1 });
    const error = await agreedLink(shared, 2, 'none', 1000).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ArgumentError);
    expect((error as Error).message).toBe(
      '[initProcessGroup] rank 2 simulates the link null but rank 0 simulates {"latencyMs":1}: set WEBSHARD_LINK alike on every node',
    );
  });
});
