import { type AbortReason, TransportAbortedError } from '../errors.js';
import { NO_STAMP, type OpStamp, stampMismatch } from '../op-stamp.js';
import { arrive } from '../transport-contract.js';
import { ExpectedBytes } from './expected-bytes.js';
import { UNEXPECTED_BYTES_VARIABLE } from './unexpected-budget.js';

/** A receive posted by `recv`. */
interface PostedRecv {
  readonly dst: Uint8Array;
  /** The stamp of the op the receive belongs to ([Note: op stamps]). */
  readonly stamp: OpStamp;
  /** Rule 9 of [Note: the transport contract]: called before the next message is matched. */
  readonly onArrive: (() => void) | undefined;
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
}

/** A message arrived before its receive, kept in a pooled buffer. */
interface Stashed {
  readonly buffer: ArrayBuffer;
  readonly length: number;
  readonly sender: number;
  readonly stamp: OpStamp;
  /** Whether it counts against the budget ([Note: an op's own bytes are expected]: not if not). */
  readonly counted: boolean;
}

interface Slot {
  readonly arrived: Stashed[];
  readonly waiting: PostedRecv[];
}

/** One incoming message being filled: straight into a posted receive, or into a pooled stash. */
export interface Incoming {
  readonly peer: number;
  readonly tag: number;
  /** The sender the message names, and its op stamp ([Note: op stamps]). */
  readonly sender: number;
  readonly stamp: OpStamp;
  /** Where the payload bytes go, exactly `length` long. */
  readonly target: Uint8Array;
  readonly recv: PostedRecv | null;
  readonly stash: ArrayBuffer | null;
  /** A stashed message that counts against the budget. */
  readonly counted: boolean;
}

const MIN_POOLED = 4096;

const MAX_POOLED_BYTES = 512 << 20;

function sizeClass(length: number): number {
  return length <= MIN_POOLED ? MIN_POOLED : 2 ** Math.ceil(Math.log2(length));
}

/**
 * Matches incoming messages to receives per `(peer, tag)`, in order (rules 1 to 3 of
 * [Note: the transport contract]); the one receive queue of every transport here. A transport
 * that reads a message piece by piece calls `begin` when its length is known and `complete` once
 * `Incoming.target` is full: when the receive is already posted, the target is the receive's own
 * buffer, so the bytes are written (or read from a socket) straight into it. A message that comes
 * first goes into a buffer from a pool by power-of-two size class, returned when a receive consumes
 * it, so a steady stream of same-sized messages allocates nothing. `deliver` does both steps for a
 * message already whole in memory (the local transport). Where a message meets its receive it
 * checks that the message is the receive's op's, of its sender and length, before a byte lands
 * ([Note: op stamps]). Browser-safe.
 */
export class Mailbox {
  private readonly slots = new Map<number, Map<number, Slot>>();
  private readonly pool = new Map<number, ArrayBuffer[]>();
  private pooledBytes = 0;
  /** Payload bytes that arrived before their receive was posted, and were copied aside. */
  unexpectedBytes = 0;
  private readonly inflight = new Set<Incoming>();
  private abortError: TransportAbortedError | null = null;
  /**
   * After an abort, the peers whose receives still wait for what they sent before the abort
   * reached them ([Note: draining after an abort] in framed/framed-transport.ts).
   */
  private readonly draining = new Set<number>();
  /** Per peer, payload bytes copied aside that no receive has claimed yet (and no op expects). */
  private readonly held = new Map<number, number>();
  private readonly expected = new ExpectedBytes();

  /**
   * `maxUnexpectedBytes`: the most unclaimed payload held per peer ([Note: the unexpected-message
   * budget] in unexpected-budget.ts); unlimited when not given.
   */
  constructor(
    private readonly rank: number,
    private readonly onViolation: (reason: AbortReason) => void,
    private readonly maxUnexpectedBytes = Number.POSITIVE_INFINITY,
  ) {}

  /** Payload bytes from `peer` held now that no receive has claimed. */
  heldFrom(peer: number): number {
    return this.held.get(peer) ?? 0;
  }

  private hold(peer: number, bytes: number): void {
    this.held.set(peer, (this.held.get(peer) ?? 0) + bytes);
  }

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
   * Posts a receive of the op stamped `stamp`: filled at once from a stashed message, or queued.
   * A message that is not the op's rejects it and aborts ([Note: op stamps]).
   */
  recv(
    peer: number,
    tag: number,
    dst: Uint8Array,
    onArrive?: () => void,
    stamp: OpStamp = NO_STAMP,
  ): Promise<void> {
    if (this.abortError !== null && !this.draining.has(peer) && !this.hasArrived(peer, tag))
      return Promise.reject(this.abortError);
    return new Promise<void>((resolve, reject) => {
      const slot = this.slot(peer, tag);
      const arrived = slot.arrived.shift();
      if (arrived === undefined) {
        slot.waiting.push({ dst, stamp, onArrive, resolve, reject });
        return;
      }
      const { sender, length } = arrived;
      const ok = this.matches(peer, tag, stamp, dst, sender, arrived.stamp, length, reject);
      if (ok) dst.set(new Uint8Array(arrived.buffer, 0, length));
      if (arrived.counted) this.hold(peer, -length);
      this.release(arrived.buffer);
      if (ok) {
        arrive(onArrive);
        resolve();
      }
    });
  }

  /**
   * Starts an incoming message of `length` bytes from `peer` on `tag`, naming `sender` and
   * stamped `stamp`. Returns null when it is not what the posted receive expects ([Note: op
   * stamps]: its length, sender or op), or when no buffer of `length` bytes can be allocated (the
   * violation is already reported).
   */
  begin(
    peer: number,
    tag: number,
    length: number,
    stamp: OpStamp = NO_STAMP,
    sender = peer,
  ): Incoming | null {
    const recv = this.slot(peer, tag).waiting.shift() ?? null;
    const expected = this.expected.take(peer, tag, stamp, length);
    if (recv !== null) {
      if (!this.matches(peer, tag, recv.stamp, recv.dst, sender, stamp, length, recv.reject)) {
        return null;
      }
      const target = recv.dst;
      const incoming: Incoming = {
        ...{ peer, tag, sender, stamp, target, recv },
        ...{ stash: null, counted: false },
      };
      this.inflight.add(incoming);
      return incoming;
    }
    const held = this.heldFrom(peer);
    if (!expected && held + length > this.maxUnexpectedBytes) {
      this.onViolation({
        kind: 'error',
        origin: this.rank,
        peer,
        message: `rank ${this.rank} holds ${held} bytes from rank ${peer} that no receive has claimed; a message of ${length} bytes on tag ${tag} would pass the budget of ${this.maxUnexpectedBytes} bytes per peer (raise it with the transport's maxUnexpectedBytes or ${UNEXPECTED_BYTES_VARIABLE})`,
      });
      return null;
    }
    let stash: ArrayBuffer;
    try {
      stash = this.acquire(length);
    } catch (error) {
      // A length the frame check let through (up to `maxMessageBytes`) that this process cannot
      // allocate: a typed abort naming the peer, never a throw into the socket's callback.
      const reason: AbortReason = {
        kind: 'error',
        origin: this.rank,
        peer,
        message: `rank ${this.rank} cannot hold a message of ${length} bytes from rank ${peer} on tag ${tag}: ${String(error)}`,
      };
      this.onViolation(reason);
      return null;
    }
    this.unexpectedBytes += length;
    if (!expected) this.hold(peer, length);
    const incoming: Incoming = {
      ...{ peer, tag, sender, stamp, target: new Uint8Array(stash, 0, length) },
      ...{ recv: null, stash, counted: !expected },
    };
    this.inflight.add(incoming);
    return incoming;
  }

  /** Finishes a message whose `target` is full. */
  complete(incoming: Incoming): void {
    if (!this.inflight.delete(incoming)) return;
    if (incoming.recv !== null) {
      arrive(incoming.recv.onArrive);
      incoming.recv.resolve();
      return;
    }
    const slot = this.slot(incoming.peer, incoming.tag);
    const waiting = slot.waiting.shift();
    const { peer, tag, sender, stamp, counted } = incoming;
    const length = incoming.target.byteLength;
    if (waiting === undefined) {
      slot.arrived.push({ buffer: incoming.stash!, length, sender, stamp, counted });
      return;
    }
    if (counted) this.hold(peer, -length);
    const { dst, reject } = waiting;
    if (!this.matches(peer, tag, waiting.stamp, dst, sender, stamp, length, reject)) {
      this.release(incoming.stash!);
      return;
    }
    waiting.dst.set(incoming.target);
    this.release(incoming.stash!);
    arrive(waiting.onArrive);
    waiting.resolve();
  }

  /** A whole message in memory: `begin`, one copy into the target, `complete`. */
  deliver(peer: number, tag: number, data: Uint8Array, stamp = NO_STAMP, sender = peer): void {
    const incoming = this.begin(peer, tag, data.byteLength, stamp, sender);
    if (incoming === null) return;
    incoming.target.set(data);
    this.complete(incoming);
  }

  /**
   * Op `stamp` will receive at most `bytes` in `messages` messages from `peer` on `tag`: what of
   * them comes before its receive is held outside the budget ([Note: an op's own bytes are
   * expected] in expected-bytes.ts). Returns the function that ends the allowance.
   */
  expect(peer: number, tag: number, stamp: OpStamp, bytes: number, messages: number): () => void {
    return this.expected.expect(peer, tag, stamp, bytes, messages);
  }

  /** Whether a whole message from `peer` on `tag` waits for its receive. */
  hasArrived(peer: number, tag: number): boolean {
    return (this.slots.get(peer)?.get(tag)?.arrived.length ?? 0) > 0;
  }

  /** Whether a receive from `peer` is posted or being filled. */
  hasPending(peer: number): boolean {
    for (const incoming of this.inflight) if (incoming.peer === peer && incoming.recv) return true;
    for (const slot of this.slots.get(peer)?.values() ?? [])
      if (slot.waiting.length > 0) return true;
    return false;
  }

  /** Whether any receive is posted and still waits for (the rest of) its message. */
  hasWaiting(): boolean {
    for (const incoming of this.inflight) if (incoming.recv !== null) return true;
    for (const byTag of this.slots.values()) {
      for (const slot of byTag.values()) if (slot.waiting.length > 0) return true;
    }
    return false;
  }

  /**
   * Rejects every posted receive, now and later (those being filled too), except those a message
   * that is already here serves; what the peer the reason names (the one at fault: a flood, a
   * malformed frame, a death) sent aside is dropped. Receives from the peers in `draining` are
   * spared, and such receives may still be posted, until `endDrain` ([Note: draining after an
   * abort] in framed/framed-transport.ts).
   */
  abort(reason: AbortReason, draining: Iterable<number> = []): void {
    if (this.abortError !== null) return;
    this.abortError = new TransportAbortedError(reason);
    for (const peer of draining) this.draining.add(peer);
    // Every peer with a receive, a message aside or one being filled has a slot (`begin`, `recv`).
    for (const peer of this.slots.keys()) if (!this.draining.has(peer)) this.fail(peer);
    if (reason.peer !== undefined) this.dropArrived(reason.peer);
    this.pool.clear();
    this.pooledBytes = 0;
  }

  /** After an abort, `peer` has sent all it will: its receives that wait now reject. */
  endDrain(peer: number): void {
    if (this.draining.delete(peer)) this.fail(peer);
  }

  /** Whether receives from `peer` are still served after an abort. */
  isDraining(peer: number): boolean {
    return this.draining.has(peer);
  }

  /**
   * Rejects `peer`'s posted receives (those being filled too). What it sent whole before the abort
   * stays for the receives that will claim it: a rank behind may read a peer's abort frame before
   * its op asks for a message that came ahead of it.
   */
  private fail(peer: number): void {
    const error = this.abortError!;
    for (const incoming of this.inflight) {
      if (incoming.peer !== peer) continue;
      this.inflight.delete(incoming);
      incoming.recv?.reject(error);
    }
    for (const slot of this.slots.get(peer)?.values() ?? []) {
      for (const waiting of slot.waiting.splice(0)) waiting.reject(error);
    }
  }

  /** Drops what `peer` sent that no receive has claimed. */
  private dropArrived(peer: number): void {
    for (const slot of this.slots.get(peer)?.values() ?? []) slot.arrived.length = 0;
    this.held.delete(peer);
  }

  /**
   * The one check of [Note: op stamps], where a message meets a receive: whether the message
   * (`sender`, `stamp`, `length` bytes) is what the receive (`expected`, `dst`) takes. When not,
   * the receive rejects and the transport aborts, before a byte reaches `dst`.
   */
  private matches(
    peer: number,
    tag: number,
    expected: OpStamp,
    dst: Uint8Array,
    sender: number,
    stamp: OpStamp,
    length: number,
    reject: (error: Error) => void,
  ): boolean {
    const reason = stampMismatch(
      this.rank,
      peer,
      tag,
      expected,
      dst.byteLength,
      sender,
      stamp,
      length,
    );
    if (reason === null) return true;
    reject(new TransportAbortedError(reason));
    this.onViolation(reason);
    return false;
  }

  private acquire(length: number): ArrayBuffer {
    const size = sizeClass(length);
    const free = this.pool.get(size);
    const buffer = free?.pop();
    if (buffer !== undefined) {
      this.pooledBytes -= size;
      return buffer;
    }
    return new ArrayBuffer(size);
  }

  private release(buffer: ArrayBuffer): void {
    if (this.abortError !== null) return;
    if (this.pooledBytes + buffer.byteLength > MAX_POOLED_BYTES) return;
    let free = this.pool.get(buffer.byteLength);
    if (free === undefined) {
      free = [];
      this.pool.set(buffer.byteLength, free);
    }
    free.push(buffer);
    this.pooledBytes += buffer.byteLength;
  }
}
