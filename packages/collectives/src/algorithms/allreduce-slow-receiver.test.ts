import { describe, expect, it } from 'vitest';
import type { AbortReason } from '../errors.js';
import type { OpStamp } from '../op-stamp.js';
import { ProcessGroup } from '../process-group.js';
import { createNetworkWorld } from '../test-support/network-world.js';
import type { Transport } from '../transport-contract.js';

const MiB = 1 << 20;

/**
 * A rank whose thread moves its op slower than the link delivers: every receive it makes is seen
 * 25 ms after its bytes are in and after the one before (the rank's thread busy elsewhere, its
 * core taken), so it posts its next ring receive that much later, while its transport reads on.
 */
class SlowMover implements Transport {
  readonly rank: number;
  readonly size: number;
  readonly kind: string;
  private seen: Promise<void> = Promise.resolve();
  constructor(private readonly inner: Transport) {
    this.rank = inner.rank;
    this.size = inner.size;
    this.kind = inner.kind;
  }
  get abortReason(): AbortReason | null {
    return this.inner.abortReason;
  }
  send(peer: number, tag: number, data: Uint8Array, stamp?: OpStamp): Promise<void> {
    return this.inner.send(peer, tag, data, stamp);
  }
  async recv(
    peer: number,
    tag: number,
    dst: Uint8Array,
    onArrive?: () => void,
    stamp?: OpStamp,
  ): Promise<void> {
    const received = this.inner.recv(peer, tag, dst, onArrive, stamp);
    // Seen one at a time, 25 ms apart.
    const seen = this.seen.then(async () => {
      await received;
      await new Promise((resolve) => setTimeout(resolve, 25));
    });
    this.seen = seen.catch(() => {});
    return seen;
  }
  expect(peer: number, tag: number, stamp: OpStamp, bytes: number, messages: number): () => void {
    return this.inner.expect!(peer, tag, stamp, bytes, messages);
  }
  abort(reason: AbortReason): void {
    this.inner.abort(reason);
  }
  onAbort(listener: (reason: AbortReason) => void): () => void {
    return this.inner.onAbort(listener);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
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
describe.each(['tcp', 'ws'] as const)(
  'an all-reduce of 48 MiB over %s, 3 ranks, rank 1 slow',
  (kind) => {
    it('sums right on every rank with 8 MiB allowed unclaimed', async () => {
      const size = 3;
      const elements = (48 * MiB) / 4;
      const world = await createNetworkWorld(kind, size, 'test-token', {
        maxUnexpectedBytes: 8 * MiB,
      });
      try {
        const groups = world.transports.map((t, rank) =>
          ProcessGroup.fromTransport(rank === 1 ? new SlowMover(t) : t, { timeoutMs: 60_000 }),
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
