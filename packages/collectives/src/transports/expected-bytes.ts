import type { OpStamp } from '../op-stamp.js';

/**
 * [Note: an op's own bytes are expected]
 * The budget for unclaimed messages ([Note: the unexpected-message budget]) is there for bytes no
 * op of this rank has asked for: a peer sending on tags nobody receives on, a peer that runs ops
 * ahead of one that has not begun them ([Note: a ring asks before it sends] covers the large
 * ones). It used to count as well the bytes of an op this rank *has* begun, whose receives it
 * posts a window at a time: a ring's left sends its first chunk at once and the next as soon as
 * its own left feeds it, so a rank that moves its op slower than the link delivers (its thread
 * busy, its core taken by the other ranks) held up to two chunks of the op aside. DDP's first
 * step on 3 thread ranks of GPT-2 124M over tcp (`delayAllreduce: 'auto'` tries one flat
 * all-reduce of 498 MB: chunks of 166 MB) aborted so, rank 1 holding 265 796 608 bytes from rank
 * 0 against the 256 MiB budget, while every byte was the op's own and would have been claimed.
 *
 * So an op that knows what it will receive says so when it begins (`Transport.expect`, rule 11 of
 * [Note: the transport contract]): from `peer`, on its group's `tag`, stamped with its op, at most
 * `bytes` in `messages` messages. A message that arrives before its receive and carries that
 * stamp is set aside outside the budget while the op's allowance lasts; the allowance shrinks by
 * every message of the op from that peer, set aside or not, and is dropped when the op ends. What
 * a rank holds so is bounded by what its own op will take, as a full-size receive buffer would be
 * (gloo's ring allocates one), without allocating it when the ranks keep pace. A message of the op
 * beyond its allowance, another op's message or one with no stamp counts against the budget as
 * before. The ring all-reduce and reduce-scatter say it (`ringReduce`); a transport that wraps
 * another forwards it (the link shaper adds its 8-byte due-time message per message).
 */
export class ExpectedBytes {
  /** Per peer and tag, the allowances of the ops that said what they expect. */
  private readonly byPeer = new Map<number, Map<number, Allowance[]>>();

  /** Op `stamp` expects at most `bytes` in `messages` messages from `peer` on `tag`. */
  expect(peer: number, tag: number, stamp: OpStamp, bytes: number, messages: number): () => void {
    let byTag = this.byPeer.get(peer);
    if (byTag === undefined) {
      byTag = new Map();
      this.byPeer.set(peer, byTag);
    }
    let list = byTag.get(tag);
    if (list === undefined) {
      list = [];
      byTag.set(tag, list);
    }
    const allowance: Allowance = { op: stamp.op, seq: stamp.seq, bytes, messages };
    list.push(allowance);
    return () => {
      const at = list.indexOf(allowance);
      if (at >= 0) list.splice(at, 1);
      if (list.length === 0) byTag.delete(tag);
      if (byTag.size === 0) this.byPeer.delete(peer);
    };
  }

  /**
   * A message of `length` bytes stamped `stamp` came from `peer` on `tag`: whether an op expects
   * it (its allowance is taken down by it then).
   */
  take(peer: number, tag: number, stamp: OpStamp, length: number): boolean {
    const list = this.byPeer.get(peer)?.get(tag);
    if (list === undefined) return false;
    for (const allowance of list) {
      if (allowance.op !== stamp.op || allowance.seq !== stamp.seq) continue;
      if (allowance.messages <= 0 || allowance.bytes < length) return false;
      allowance.messages -= 1;
      allowance.bytes -= length;
      return true;
    }
    return false;
  }
}

interface Allowance {
  readonly op: number;
  readonly seq: number;
  bytes: number;
  messages: number;
}
