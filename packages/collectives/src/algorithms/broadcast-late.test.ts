import { describe, expect, it } from 'vitest';
import { ProcessGroup } from '../process-group.js';
import { createNetworkWorld } from '../test-support/network-world.js';
import { CLEAR_TO_SEND_BYTES } from './gather.js';

const MiB = 1 << 20;

/**
 * [Note: a broadcast asks before it sends]: a receiver late to a large broadcast (here 1.5 s, a
 * rank still building its model) must not be handed the whole buffer as unclaimed messages. The
 * transports' budget for those is 4 MiB here (256 MiB by default, against DiLoCo's 495 MB first
 * broadcast at GPT-2 size); the buffer is 24 MiB. Without the asking, rank 1 aborts the group
 * ("a message of ... bytes would pass the budget").
 */
describe.each([
  ['tcp', 2],
  ['ws', 2],
  ['tcp', 3],
] as const)('a broadcast of 24 MiB over %s, %i ranks, the last rank 1.5 s late', (kind, size) => {
  it('arrives whole on every rank, with 4 MiB allowed unclaimed', async () => {
    const bytes = 24 * MiB;
    expect(bytes).toBeGreaterThan(CLEAR_TO_SEND_BYTES);
    const world = await createNetworkWorld(kind, size, 'test-token', {
      maxUnexpectedBytes: 4 * MiB,
    });
    try {
      const groups = world.transports.map((t) =>
        ProcessGroup.fromTransport(t, { timeoutMs: 30_000 }),
      );
      const expected = new Float32Array(bytes / 4).map((_, i) => (i % 1009) - 504);
      const results = await Promise.all(
        groups.map(async (group, rank) => {
          const data = rank === 0 ? expected.slice() : new Float32Array(bytes / 4);
          if (rank === size - 1) await new Promise((resolve) => setTimeout(resolve, 1500));
          await group.broadcast(data, 0).wait();
          return data;
        }),
      );
      // Compared as bytes: a deep equality of 6 M elements takes a minute.
      const bytesOf = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
      for (const data of results) expect(bytesOf(data).equals(bytesOf(expected))).toBe(true);
    } finally {
      await world.close();
    }
  }, 60_000);
});
