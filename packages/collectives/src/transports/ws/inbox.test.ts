import { describe, expect, it } from 'vitest';
import type { AbortReason } from '../../errors.js';
import { Inbox } from './inbox.js';

describe('Inbox', () => {
  it('reports a message too large to allocate as a violation naming the peer, never a throw', () => {
    const reasons: AbortReason[] = [];
    const inbox = new Inbox(0, (reason) => reasons.push(reason));
    expect(inbox.begin(1, 3, 2 ** 52)).toBeNull();
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toMatchObject({ kind: 'error', origin: 0, peer: 1 });
    expect(reasons[0]!.message).toMatch(
      `rank 0 cannot hold a message of ${2 ** 52} bytes from rank 1 on tag 3: RangeError`,
    );
    expect(inbox.unexpectedBytes).toBe(0);
  });
});
