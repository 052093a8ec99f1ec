import { describe, expect, it } from 'vitest';
import { type AbortReason, TransportAbortedError } from '../errors.js';
import { NO_STAMP, opStamp } from '../op-stamp.js';
import { Mailbox } from './mailbox.js';

describe('Mailbox', () => {
  it('reports a message too large to allocate as a violation naming the peer, never a throw', () => {
    const reasons: AbortReason[] = [];
    const mailbox = new Mailbox(0, (reason) => reasons.push(reason));
    expect(mailbox.begin(1, 3, 2 ** 52)).toBeNull();
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toMatchObject({ kind: 'error', origin: 0, peer: 1 });
    expect(reasons[0]!.message).toMatch(
      `rank 0 cannot hold a message of ${2 ** 52} bytes from rank 1 on tag 3: RangeError`,
    );
    expect(mailbox.unexpectedBytes).toBe(0);
  });

  it('matches messages to receives per peer and tag in order, whichever comes first', async () => {
    const mailbox = new Mailbox(0, () => {});
    const first = new Uint8Array(2);
    const posted = mailbox.recv(1, 7, first);
    mailbox.deliver(1, 7, Uint8Array.from([1, 2]));
    mailbox.deliver(1, 7, Uint8Array.from([3, 4]));
    mailbox.deliver(2, 7, Uint8Array.from([5, 6]));
    await posted;
    const second = new Uint8Array(2);
    const other = new Uint8Array(2);
    await Promise.all([mailbox.recv(1, 7, second), mailbox.recv(2, 7, other)]);
    expect([...first, ...second, ...other]).toEqual([1, 2, 3, 4, 5, 6]);
    expect(mailbox.unexpectedBytes).toBe(4);
  });

  it('rejects a receive being filled when it aborts, and every receive posted after', async () => {
    const mailbox = new Mailbox(0, () => {});
    const filling = mailbox.recv(1, 0, new Uint8Array(8)).catch((e: unknown) => e);
    expect(mailbox.begin(1, 0, 8)).not.toBeNull();
    expect(mailbox.hasWaiting()).toBe(true);
    const reason: AbortReason = { kind: 'user', origin: 0, message: 'closed' };
    mailbox.abort(reason);
    expect(await filling).toBeInstanceOf(TransportAbortedError);
    await expect(mailbox.recv(1, 0, new Uint8Array(8))).rejects.toThrow(TransportAbortedError);
  });

  it('holds at most its budget of unclaimed bytes per peer; claimed bytes free the budget', async () => {
    const reasons: AbortReason[] = [];
    const mailbox = new Mailbox(0, (reason) => reasons.push(reason), 10);
    mailbox.deliver(1, 1, new Uint8Array(6));
    mailbox.deliver(2, 1, new Uint8Array(6));
    expect([mailbox.heldFrom(1), mailbox.heldFrom(2)]).toEqual([6, 6]);
    await mailbox.recv(1, 1, new Uint8Array(6));
    expect(mailbox.heldFrom(1)).toBe(0);
    // A message completed into a receive posted while it was being stashed frees its bytes too.
    const incoming = mailbox.begin(1, 2, 4)!;
    const claimed = mailbox.recv(1, 2, new Uint8Array(4));
    mailbox.complete(incoming);
    await claimed;
    mailbox.deliver(1, 3, new Uint8Array(10));
    expect(reasons).toEqual([]);
    expect(mailbox.begin(1, 4, 1)).toBeNull();
    expect(reasons).toEqual([
      {
        kind: 'error',
        origin: 0,
        peer: 1,
        message:
          "rank 0 holds 10 bytes from rank 1 that no receive has claimed; a message of 1 bytes on tag 4 would pass the budget of 10 bytes per peer (raise it with the transport's maxUnexpectedBytes or WEBSHARD_MAX_UNEXPECTED_BYTES)",
      },
    ]);
  });

  it("holds an op's own early messages outside the budget while its allowance lasts", async () => {
    // See [Note: an op's own bytes are expected].
    const reasons: AbortReason[] = [];
    const mailbox = new Mailbox(0, (reason) => reasons.push(reason), 10);
    const op = opStamp('allReduce', 4);
    const release = mailbox.expect(1, 9, op, 24, 3);
    for (let i = 0; i < 3; i++) mailbox.deliver(1, 9, new Uint8Array(8).fill(i), op);
    expect(mailbox.heldFrom(1)).toBe(0);
    // Another op's message, and one of the op past its allowance, count against the budget.
    mailbox.deliver(1, 9, new Uint8Array(6), opStamp('allReduce', 5));
    mailbox.deliver(1, 9, new Uint8Array(4), op);
    expect(mailbox.heldFrom(1)).toBe(10);
    expect(reasons).toEqual([]);
    const got = [0, 1, 2].map(() => new Uint8Array(8));
    await Promise.all(got.map((dst) => mailbox.recv(1, 9, dst, undefined, op)));
    expect(got.map((dst) => dst[0])).toEqual([0, 1, 2]);
    expect(mailbox.heldFrom(1)).toBe(10);
    await mailbox.recv(1, 9, new Uint8Array(6), undefined, opStamp('allReduce', 5));
    await mailbox.recv(1, 9, new Uint8Array(4), undefined, op);
    expect(mailbox.heldFrom(1)).toBe(0);
    // Ended: the op's next early message counts again, and past the budget aborts.
    release();
    mailbox.deliver(1, 9, new Uint8Array(10), op);
    expect(mailbox.heldFrom(1)).toBe(10);
    expect(mailbox.begin(1, 9, 1, op)).toBeNull();
    expect(reasons).toHaveLength(1);
    // An allowance is per peer and tag: the same op's messages from rank 2 or on tag 8 count.
    const other = new Mailbox(0, () => {}, 100);
    other.expect(1, 9, op, 100, 10);
    other.deliver(2, 9, new Uint8Array(5), op);
    other.deliver(1, 8, new Uint8Array(7), op);
    expect([other.heldFrom(1), other.heldFrom(2)]).toEqual([7, 5]);
  });
});

describe('Mailbox op stamps ([Note: op stamps])', () => {
  const expected = opStamp('allGather', 5);
  /** How a case gets at the mailbox: post the receive, deliver the message, or start it. */
  interface Steps {
    mailbox: Mailbox;
    post(): void;
    deliver(): void;
    begin(): ReturnType<Mailbox['begin']>;
  }
  /** Each place a message meets its receive: the receive posted first, or the message. */
  const meetings: Record<string, (steps: Steps) => void> = {
    'a receive posted first (begin)': ({ post, deliver }) => {
      post();
      deliver();
    },
    'a message stashed first (recv)': ({ post, deliver }) => {
      deliver();
      post();
    },
    'a receive posted while its message was stashed (complete)': ({ mailbox, post, begin }) => {
      const incoming = begin()!;
      post();
      mailbox.complete(incoming);
    },
  };
  const wrong = [
    ['a wrong seq', opStamp('allGather', 6), 8, 1, "rank 1's allGather seq 6 (8 bytes)"],
    ['a wrong kind', opStamp('allReduce', 5), 8, 1, "rank 1's allReduce seq 5 (8 bytes)"],
    ['a wrong byte count', expected, 16, 1, "rank 1's allGather seq 5 (16 bytes)"],
    ['a wrong sender', expected, 8, 2, "rank 2's allGather seq 5 (8 bytes)"],
    ['no stamp', NO_STAMP, 8, 1, "rank 1's message without an op stamp (8 bytes)"],
    [
      'a fingerprint',
      opStamp('allGather', 5, true),
      8,
      1,
      "rank 1's allGather fingerprint seq 5 (8 bytes)",
    ],
  ] as const;
  for (const [meeting, meet] of Object.entries(meetings)) {
    it.each(wrong)(
      `rejects %s at ${meeting}, and leaves the buffer alone`,
      async (what, stamp, bytes, sender, received) => {
        const reasons: AbortReason[] = [];
        const mailbox = new Mailbox(0, (reason) => reasons.push(reason));
        const dst = new Uint8Array(8).fill(0xee);
        let receive: Promise<unknown> = Promise.resolve();
        const data = new Uint8Array(bytes).fill(7);
        meet({
          mailbox,
          post: () => {
            receive = mailbox.recv(1, 3, dst, undefined, expected).catch((e: unknown) => e);
          },
          deliver: () => mailbox.deliver(1, 3, data, stamp, sender),
          begin: () => mailbox.begin(1, 3, bytes, stamp, sender),
        });
        const expectedText =
          what === 'a wrong sender'
            ? "rank 1's allGather seq 5 (8 bytes)"
            : 'allGather seq 5 (8 bytes)';
        const reason: AbortReason = {
          kind: 'mismatch',
          origin: 0,
          peer: 1,
          tag: 3,
          seq: 5,
          message: `received ${received} where ${expectedText} was expected`,
        };
        const error = await receive;
        expect(error).toBeInstanceOf(TransportAbortedError);
        expect((error as TransportAbortedError).reason).toEqual(reason);
        expect(reasons).toEqual([reason]);
        expect([...dst]).toEqual(new Array(8).fill(0xee));
      },
    );
  }

  it("takes the op's own messages, and any op's fingerprint where a fingerprint is expected", async () => {
    const reasons: AbortReason[] = [];
    const mailbox = new Mailbox(0, (reason) => reasons.push(reason));
    const fingerprint = new Uint8Array(4);
    const own = new Uint8Array(2);
    const received = Promise.all([
      mailbox.recv(1, 3, fingerprint, undefined, opStamp('allGather', 5, true)),
      mailbox.recv(1, 3, own, undefined, expected),
    ]);
    mailbox.deliver(1, 3, Uint8Array.from([1, 2, 3, 4]), opStamp('broadcast', 9, true));
    mailbox.deliver(1, 3, Uint8Array.from([5, 6]), expected);
    await received;
    expect([...fingerprint, ...own]).toEqual([1, 2, 3, 4, 5, 6]);
    expect(reasons).toEqual([]);
  });

  it('keeps the length error of rule 3 between messages without stamps', async () => {
    const mailbox = new Mailbox(0, () => {});
    mailbox.deliver(1, 3, new Uint8Array(4));
    const error = await mailbox.recv(1, 3, new Uint8Array(2)).catch((e: unknown) => e);
    expect((error as TransportAbortedError).reason).toEqual({
      kind: 'error',
      origin: 0,
      peer: 1,
      message: 'rank 0 expected a message of 2 bytes from rank 1 on tag 3, got 4',
    });
  });
});
