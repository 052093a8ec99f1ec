import { describe, expect, it } from 'vitest';
import { ProcessGroup } from '../process-group.js';
import { createNetworkWorld } from '../test-support/network-world.js';
import type { Transport } from '../transport-contract.js';
import { shapeLink } from '../two-level/link-shaper.js';

const MiB = 1 << 20;

/**
 * A rank whose thread moves its op slower than the link delivers: every receive it makes is seen
 * 25 ms after its bytes are in and after the one before (the rank's thread busy elsewhere, its
 * core taken), so it posts its next ring receive that much later, while its transport reads on.
 * Everything else (`expect` included) is `inner`'s.
 */
function slowMover(inner: Transport): Transport {
  let seen: Promise<void> = Promise.resolve();
  const recv: Transport['recv'] = (peer, tag, dst, onArrive, stamp) => {
    const received = inner.recv(peer, tag, dst, onArrive, stamp);
    const next = seen.then(async () => {
      await received;
      await new Promise((resolve) => setTimeout(resolve, 25));
    });
    seen = next.catch(() => {});
    return next;
  };
  return new Proxy(inner, {
    get(target, key) {
      if (key === 'recv') return recv;
      const value: unknown = Reflect.get(target, key, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/**
 * [Note: an op's own bytes are expected]: a rank that has begun its all-reduce but moves it slowly
 * is poured the op's own chunks by its left (its first chunk at once, the next as its left's left
 * feeds it). One all-reduce of 48 MiB on 3 ranks (chunks of 16 MiB), a budget of 8 MiB for
 * unclaimed messages (256 MiB by default; DDP's flat all-reduce of GPT-2 124M passed that on 3
 * thread ranks), rank 1 slow. Before the op's receives were expected, rank 1 held more than 8 MiB
 * from rank 0 and the group aborted ("would pass the budget"); now it holds them and every rank
 * gets the exact sum. Another op's message still counts (mailbox.test.ts).
 */
describe.each([
  ['tcp', false],
  ['ws', false],
  ['tcp', true],
] as const)(
  'an all-reduce of 48 MiB over %s (shaped to datacenter: %s), 3 ranks, rank 1 slow',
  (kind, shaped) => {
    it('sums right on every rank with 8 MiB allowed unclaimed', async () => {
      const size = 3;
      const elements = (48 * MiB) / 4;
      const world = await createNetworkWorld(kind, size, 'test-token', {
        maxUnexpectedBytes: 8 * MiB,
      });
      try {
        // Shaped, the shaper must pass the op's allowance to the transport under it (with its
        // 8-byte due time ahead of each message): without its `expect` this case aborts.
        const links = world.transports.map((t) =>
          shaped ? shapeLink(t, { latencyMs: 0.05, gbitPerSecond: 10 }) : t,
        );
        const groups = links.map((t, rank) =>
          ProcessGroup.fromTransport(rank === 1 ? slowMover(t) : t, { timeoutMs: 60_000 }),
        );
        const value = (rank: number, i: number) => ((i * 7 + rank * 3) % 61) - 30;
        const results = await Promise.all(
          groups.map(async (group, rank) => {
            const buffer = new Float32Array(elements).map((_, i) => value(rank, i));
            await group.allReduce(buffer).wait();
            return buffer;
          }),
        );
        const expected = new Float32Array(elements);
        for (let i = 0; i < elements; i++) {
          for (let r = 0; r < size; r++) expected[i]! += value(r, i);
        }
        const want = Buffer.from(expected.buffer);
        for (const got of results) expect(Buffer.from(got.buffer).equals(want)).toBe(true);
        // The slow rank did hold the op's bytes aside (more than the budget): the case is real.
        const held = (world.transports[1] as unknown as { unexpectedBytes: number })
          .unexpectedBytes;
        expect(held).toBeGreaterThan(8 * MiB);
      } finally {
        await world.close();
      }
    }, 90_000);
  },
);
