import { type AbortReason, TransportAbortedError } from '../errors.js';
import { arrive } from '../transport.js';

/** A receive waiting for its message. */
export interface PendingRecv {
  readonly dst: Uint8Array;
  /** Rule 9 of the transport contract: run once the message is in `dst`, before it resolves. */
  readonly onArrive?: () => void;
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
}

interface Slot {
  /** Messages that arrived before a receive claimed them (copies). */
  readonly arrived: Uint8Array[];
  /** Receives posted before their message arrived, in posting order. */
  readonly waiting: PendingRecv[];
}

/**
 * Matches incoming messages to posted receives per `(peer, tag)` in order (rules 1 and 2 of the
 * transport contract). Used by the transports of this package; the network transports may reuse
 * it. A delivery to a posted receive copies straight into its destination.
 */
export class Mailbox {
  private readonly slots = new Map<number, Map<number, Slot>>();

  constructor(
    private readonly rank: number,
    private readonly onViolation: (reason: AbortReason) => void,
  ) {}

  private slot(peer: number, tag: number): Slot {
    let byTag = this.slots.get(peer);
    if (byTag === undefined) {
      byTag = new Map();
      this.slots.set(peer, byTag);
    }
    let slot = byTag.get(tag);
    if (slot === undefined) {
      slot = { arrived: [], waiting: [] };
      byTag.set(tag, slot);
    }
    return slot;
  }

  /**
   * The posted receive the next message from `peer` on `tag` goes to, removed from the queue, or
   * null when none is posted (then call `stash`).
   */
  takeWaiting(peer: number, tag: number): PendingRecv | null {
    return this.slot(peer, tag).waiting.shift() ?? null;
  }

  /** Keep a message nobody waits for yet. `data` must be a copy the mailbox may own. */
  stash(peer: number, tag: number, data: Uint8Array): void {
    this.slot(peer, tag).arrived.push(data);
  }

  /** Deliver a whole message: into a posted receive when there is one, else stashed as a copy. */
  deliver(peer: number, tag: number, data: Uint8Array): void {
    const waiting = this.takeWaiting(peer, tag);
    if (waiting === null) {
      this.stash(peer, tag, data.slice());
      return;
    }
    if (!this.checkLength(peer, tag, data.byteLength, waiting)) return;
    waiting.dst.set(data);
    arrive(waiting.onArrive);
    waiting.resolve();
  }

  /** Checks rule 3; on a mismatch rejects the receive and reports a violation. */
  checkLength(peer: number, tag: number, length: number, waiting: PendingRecv): boolean {
    if (length === waiting.dst.byteLength) return true;
    const reason: AbortReason = {
      kind: 'error',
      origin: this.rank,
      peer,
      message: `rank ${this.rank} expected a message of ${waiting.dst.byteLength} bytes from rank ${peer} on tag ${tag}, got ${length}`,
    };
    waiting.reject(new TransportAbortedError(reason));
    this.onViolation(reason);
    return false;
  }

  /** Deliver a message the caller hands over (no copy when nobody waits: it is kept as is). */
  deliverOwned(peer: number, tag: number, data: Uint8Array): void {
    const waiting = this.takeWaiting(peer, tag);
    if (waiting === null) {
      this.stash(peer, tag, data);
      return;
    }
    if (!this.checkLength(peer, tag, data.byteLength, waiting)) return;
    waiting.dst.set(data);
    arrive(waiting.onArrive);
    waiting.resolve();
  }

  /** Post a receive: filled at once from a stashed message, or queued. */
  recv(peer: number, tag: number, dst: Uint8Array, onArrive?: () => void): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const slot = this.slot(peer, tag);
      const pending: PendingRecv = { dst, onArrive, resolve, reject };
      const arrived = slot.arrived.shift();
      if (arrived === undefined) {
        slot.waiting.push(pending);
        return;
      }
      if (!this.checkLength(peer, tag, arrived.byteLength, pending)) return;
      dst.set(arrived);
      arrive(onArrive);
      resolve();
    });
  }

  /** Whether any receive is posted and still waits for its message. */
  hasWaiting(): boolean {
    for (const byTag of this.slots.values()) {
      for (const slot of byTag.values()) if (slot.waiting.length > 0) return true;
    }
    return false;
  }

  /** Reject every posted receive and drop every stashed message. */
  abort(reason: AbortReason): void {
    const error = new TransportAbortedError(reason);
    for (const byTag of this.slots.values()) {
      for (const slot of byTag.values()) {
        for (const waiting of slot.waiting.splice(0)) waiting.reject(error);
        slot.arrived.length = 0;
      }
    }
  }
}
