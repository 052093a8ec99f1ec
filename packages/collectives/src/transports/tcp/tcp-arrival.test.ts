import { describe, expect, it } from 'vitest';
import { ProcessGroup } from '../../process-group.js';
import { createNetworkWorld } from '../../test-support/network-world.js';
import type { TcpTransport } from './tcp-transport.js';

// [Note: fingerprints ahead of the data]: an op's fingerprint and the head of its data usually
// arrive in one read. The fingerprint is checked in the transport's arrival hint (rule 9 of
// [Note: the transport contract]), so the held receives are posted before the data is parsed and
// it lands in place instead of being copied aside.
describe('tcp arrival hint', () => {
  it('receives the data behind a fingerprint in place', async () => {
    const world = await createNetworkWorld('tcp', 2);
    const groups = world.transports.map((t) => ProcessGroup.fromTransport(t));
    try {
      const ops = 20;
      const data = groups.map(() => new Float32Array(256 << 10).fill(1)); // 1 MiB: the ring
      for (let i = 0; i < ops; i++) {
        await Promise.all(groups.map((g) => g.barrier().wait()));
        await Promise.all(groups.map((g) => g.allReduce(data[g.rank]!).wait()));
      }
      expect(data[0]![12345]).toBe(2 ** ops);
      // Each op moves 1 MiB into each rank; checked a microtask late, half of it (the first
      // segment) was copied aside in almost every op.
      for (const transport of world.transports) {
        expect((transport as TcpTransport).unexpectedBytes).toBeLessThan(ops * (64 << 10));
      }
    } finally {
      await Promise.all(groups.map((g) => g.close()));
      await world.close();
    }
  });
});
