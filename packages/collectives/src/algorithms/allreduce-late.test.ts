import { describe, expect, it } from 'vitest';
import { ProcessGroup } from '../process-group.js';
import { createNetworkWorld } from '../test-support/network-world.js';
import { CLEAR_TO_SEND_BYTES } from './gather.js';

const MiB = 1 << 20;

/**
 * [Note: a ring asks before it sends]: a rank late to its all-reduces (here 1.5 s, a rank that has
 * not issued them yet) must not be handed two chunks of each op in flight as unclaimed messages.
 * Four all-reduces of 24 MiB are in flight at once, and the transports' budget for unclaimed
 * messages is 16 MiB a peer (256 MiB by default). Without the asking, the late rank aborts the
 * group ("a message of ... bytes would pass the budget"), at 3 ranks; at 2 (a right that is also the left:
 * its word and its data come from one peer, in that order) it is the order of the receives that
 * is checked.
 */
describe.each([
  ['tcp', 2],
  ['tcp', 3],
  ['ws', 3],
] as const)('4 all-reduces of 24 MiB over %s, %i ranks, the last rank 1.5 s late', (kind, size) => {
  it('sum right on every rank, with 16 MiB allowed unclaimed', async () => {
    const bytes = 24 * MiB;
    expect(bytes).toBeGreaterThan(CLEAR_TO_SEND_BYTES);
    const world = await createNetworkWorld(kind, size, 'test-token', {
      maxUnexpectedBytes: 16 * MiB,
    });
    try {
      const groups = world.transports.map((t) =>
        ProcessGroup.fromTransport(t, { timeoutMs: 30_000 }),
      );
      const ops = 4;
      const value = (rank: number, op: number, i: number) => ((i * 7 + op * 13 + rank) % 101) - 50;
      const results = await Promise.all(
        groups.map(async (group, rank) => {
          if (rank === size - 1) await new Promise((resolve) => setTimeout(resolve, 1500));
          const buffers = Array.from({ length: ops }, (_, op) =>
            new Float32Array(bytes / 4).map((_, i) => value(rank, op, i)),
          );
          const works = buffers.map((buffer) => group.allReduce(buffer));
          for (const work of works) await work.wait();
          return buffers;
        }),
      );
      for (let op = 0; op < ops; op++) {
        const expected = new Float32Array(bytes / 4);
        for (let i = 0; i < expected.length; i++) {
          let sum = 0;
          for (let r = 0; r < size; r++) sum += value(r, op, i);
          expected[i] = sum;
        }
        const want = Buffer.from(expected.buffer);
        for (const buffers of results) {
          const got = buffers[op]!;
          expect(Buffer.from(got.buffer, got.byteOffset, got.byteLength).equals(want)).toBe(true);
        }
      }
    } finally {
      await world.close();
    }
  }, 90_000);
});
