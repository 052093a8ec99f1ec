import type { AbortReason } from './errors.js';
import type { OpStamp } from './op-stamp.js';
import type { SharedArena } from './shared-arena.js';

/**
 * The abstract transport every process group runs on: `size` ranks that exchange ordered byte
 * messages point to point. The collectives (ring, direct exchange, trees), the per-op fingerprint,
 * the deadlines and sub-groups all live above it in `ProcessGroup`; a transport only moves bytes and
 * reports failure. Implementations: `local` (ranks in one thread), `shm` (worker threads on a
 * SharedArrayBuffer), `tcp` and `ws` (processes).
 *
 * [Note: the transport contract]
 * A transport MUST guarantee:
 *
 * 1. Ordering. Messages from one sender to one receiver with the same `tag` are received in the
 *    order the sender called `send`, whether or not the sender awaited each send. Different tags
 *    (and different peers) are independent: a message on tag 1 never waits behind an unmatched
 *    message on tag 0. Process groups use one tag per group (the world is tag 0, sub-groups count
 *    up), so the transport is shared by every group of a rank.
 * 2. Matching. `recv(peer, tag, dst)` completes with the next unreceived message from `peer` on
 *    `tag`. Several receives posted for the same `(peer, tag)` match messages in posting order. A
 *    message may arrive before its receive is posted: the transport keeps it (copying it) until a
 *    receive claims it. A receive posted first should be filled straight into `dst` (no
 *    intermediate copy where the medium allows).
 * 3. Exact sizes. The message's byte length must equal `dst.byteLength`. A different length is a
 *    protocol violation: the transport aborts with kind `error` and a message naming both lengths,
 *    the peer and the tag (with op stamps, rule 10's `mismatch`). Zero-length messages are real
 *    messages (used as tokens).
 * 4. Send completion. `send` resolves once `data` may be overwritten by the caller (the bytes were
 *    copied out or delivered). It need not wait for the receiver to post its receive, and it may
 *    resolve before the bytes reach the peer. A transport may apply back-pressure (resolve later
 *    while its buffers are full) but must not deadlock when both peers send to each other before
 *    either receives: a process group does that in every ring step.
 * 5. Abort. `abort(reason)` is idempotent (the first reason wins) and synchronous in effect: every
 *    pending `send`/`recv` rejects promptly (within milliseconds) with `TransportAbortedError`
 *    carrying the reason, later calls reject the same way, and `onAbort` listeners run once. A
 *    receive from a peer may first be served from what that peer sent before the abort reached it,
 *    for a bounded time (tcp and ws: [Note: draining after an abort]). The transport forwards the
 *    reason to the other ranks best-effort (shared memory word, a control frame, closing sockets),
 *    so that their transports abort with the SAME reason (keep `origin`).
 * 6. Dead peers. When a transport learns that a peer is gone (worker exit, socket closed or reset,
 *    no heartbeat) it aborts itself with `{ kind: 'peer-lost', origin: <this rank>, peer: <dead
 *    rank>, message }`, unless it was already aborted. Closing after `close()` on both sides is not
 *    a failure. A send or receive that fails because the peer is gone rejects with that abort's
 *    `TransportAbortedError`, never with the medium's own error (`write ECONNRESET`): the process
 *    group treats any other error as a bug and cannot name the rank.
 * 7. No deadlines. A transport does not time operations out by itself: the process group owns
 *    deadlines and calls `abort` when one passes (a transport may still detect dead peers by
 *    heartbeats, reporting them as in 6).
 * 8. Ranks and buffers. `rank` and `size` are global (world) numbers; `peer` is a global rank,
 *    never `rank` itself. `data` and `dst` are views that may be slices of larger buffers (respect
 *    `byteOffset`); they may be backed by an ArrayBuffer or a SharedArrayBuffer.
 *
 * 9. Arrival hint. A transport may call `recv`'s `onArrive` synchronously once the message is in
 *    `dst` and before it matches any later message from `peer` (it need not call it at all; the
 *    promise still resolves; this package's transports all call it, through `arrive`). A process group checks an op's fingerprint there and posts the
 *    receives that waited for it, so the data right behind the fingerprint on the wire finds them
 *    posted instead of being copied aside (see [Note: fingerprints ahead of the data]). An
 *    exception from `onArrive` is the caller's: the transport ignores it.
 * 10. Op stamps. `send`'s `stamp` travels with the message (with its tag, its sender and its byte
 *    count), and `recv`'s `stamp` is what the receive expects: when a message meets a posted
 *    receive, whichever came first, the transport checks that its sender is `peer`, its length
 *    `dst.byteLength` and its stamp the receive's (any op's fingerprint for a receive stamped as a
 *    fingerprint) before a byte reaches `dst`. A message that is not the receive's rejects it and
 *    aborts with kind `mismatch`, naming both (`stampMismatch`). A call without a stamp sends or
 *    expects `NO_STAMP`. The transports here check in `Mailbox`; see [Note: op stamps].
 * 11. Expected bytes (optional). `expect(peer, tag, stamp, bytes, messages)` says that the op
 *    stamped `stamp` will receive at most `bytes` in `messages` messages from `peer` on `tag`: what
 *    of them arrives before its receive is not held against the budget for unclaimed messages
 *    while the allowance lasts, and the returned function ends it. A transport without it counts
 *    every early message; see [Note: an op's own bytes are expected].
 *
 * Run `runTransportSuite` from `@webshard/collectives/testing` (src/suites/transport-suite.ts)
 * against a new transport: it checks these rules and every collective on top of them.
 */
export interface Transport {
  /** This process's global rank, 0 <= rank < size. */
  readonly rank: number;
  /** The number of ranks. */
  readonly size: number;
  /** A short name for messages and benchmarks (`local`, `shm`, `tcp`, `ws`). */
  readonly kind: string;
  /**
   * Optional: memory shared by all ranks, which the world group's collectives use instead of
   * messages (`shm`). Transports without it leave it undefined.
   */
  readonly sharedArena?: SharedArena;

  /**
   * Send `data` to `peer` on `tag` (a uint32), stamped with its op (rule 10; `NO_STAMP` when not
   * given). Resolves when `data` may be reused.
   */
  send(peer: number, tag: number, data: Uint8Array, stamp?: OpStamp): Promise<void>;

  /**
   * Receive the next message from `peer` on `tag` into `dst`, whose length must match exactly, and
   * whose op stamp must be `stamp` (rule 10; `NO_STAMP` when not given). `onArrive`, optional for
   * both sides, is rule 9's hint.
   */
  recv(
    peer: number,
    tag: number,
    dst: Uint8Array,
    onArrive?: () => void,
    stamp?: OpStamp,
  ): Promise<void>;

  /**
   * Optional (rule 11): the op stamped `stamp` will receive at most `bytes` in `messages` messages
   * from `peer` on `tag`. Returns the function that ends the allowance.
   */
  expect?(peer: number, tag: number, stamp: OpStamp, bytes: number, messages: number): () => void;

  /** Fail every pending and later op with `reason` and tell the other ranks. Idempotent. */
  abort(reason: AbortReason): void;

  /** The reason of the abort, once aborted (by this rank, a peer, or a dead peer); else null. */
  readonly abortReason: AbortReason | null;

  /**
   * Call `listener` once when the transport aborts (at once if it already has). Returns a function
   * that removes the listener.
   */
  onAbort(listener: (reason: AbortReason) => void): () => void;

  /**
   * Release the transport's resources. Pending ops reject with a `user` abort; peers that close too
   * do not see it as a failure. Idempotent.
   */
  close(): Promise<void>;
}

/** Runs a receive's arrival hint (rule 9); its exceptions are its caller's, not the transport's. */
export function arrive(onArrive: (() => void) | undefined): void {
  if (onArrive === undefined) return;
  try {
    onArrive();
  } catch {
    // The caller sees the same failure through the receive's promise.
  }
}

/** Small helper for transports: the listeners and the first abort reason, with rule 5's semantics. */
export class AbortState {
  private current: AbortReason | null = null;
  private readonly listeners = new Set<(reason: AbortReason) => void>();

  get reason(): AbortReason | null {
    return this.current;
  }

  /** Record `reason` if it is the first; returns whether it was. Runs the listeners. */
  trigger(reason: AbortReason): boolean {
    if (this.current !== null) return false;
    this.current = reason;
    const listeners = [...this.listeners];
    this.listeners.clear();
    for (const listener of listeners) listener(reason);
    return true;
  }

  on(listener: (reason: AbortReason) => void): () => void {
    if (this.current !== null) {
      listener(this.current);
      return () => {};
    }
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
