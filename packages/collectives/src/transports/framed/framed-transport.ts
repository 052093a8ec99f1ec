import { type AbortReason, TransportAbortedError } from '../../errors.js';
import { RendezvousError } from '../../rendezvous/errors.js';
import type { StoreClient } from '../../rendezvous/store-client.js';
import type { OpStamp } from '../../op-stamp.js';
import { AbortState, type Transport } from '../../transport-contract.js';
import { Mailbox } from '../mailbox.js';
import { resolveUnexpectedBudget } from '../unexpected-budget.js';
import { type FrameHeader, FrameKind, frameKindName, readHeader } from './frame.js';
import { type FrameHandler, FrameReader, type PayloadPlan } from './frame-reader.js';
import { controlFrame, validReason } from './hello.js';

/** A remote rank's connection state, the same on every framed transport. */
export type PeerState = 'connecting' | 'open' | 'closed' | 'dead';

/** One remote rank of a framed transport: its state, sequence numbers and frame reader. */
export class FramedPeer {
  state: PeerState = 'connecting';
  readonly sendSeq = new Map<number, number>();
  readonly recvSeq = new Map<number, number>();
  /** Send-side headers free for reuse (a send holds one until its write completes). */
  readonly freeHeaders: Uint8Array[] = [];
  byeReceived = false;
  readonly reader: FrameReader;

  constructor(
    readonly rank: number,
    handler: FrameHandler,
  ) {
    this.reader = new FrameReader(handler);
  }
}

const BYE_WAIT_MS = 2000;
/** The longest an aborted transport serves receives from a peer whose stream has not ended. */
export const ABORT_DRAIN_MS = 250;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * What the `tcp` and `ws` transports share: peers and their states, the mailbox, sends with their
 * failure rules, the frame header's meaning (data, abort, bye; [Note: network frames]), protocol
 * violations, lost peers, abort frames and the goodbye. A subclass brings its medium: how it
 * connects and says hello, how a frame is written, how abort and bye frames leave, and what it
 * closes at the end; it feeds the bytes it reads to each peer's `reader`.
 *
 * [Note: framed transports]
 * Both network transports carry the same frames and follow the same rules; only the medium
 * differs (raw sockets, one per direction, vs. one WebSocket per pair with a relay for browsers).
 * So the rules live here once: a rank that leaves without a bye is lost (and named), a malformed
 * frame aborts naming its sender, a failed write waits for the abort that names the peer
 * (`holdFailedSend`), a bye means the peer's sockets closing next is not a failure, and an abort
 * is forwarded to every open peer before this rank closes.
 *
 * [Note: draining after an abort]
 * An abort reaches a rank over one connection while messages that other peers sent before the abort
 * reached them may still wait unread on theirs. A rank that is behind (a starved process) can read
 * rank 0's abort frame before rank 2's last message of an op that every other rank has finished;
 * rejecting every receive at once failed that op on it, one op before the op the others failed in
 * (issue 44, seed 882300 of the fault-injection suite: 4 tcp processes, rank 0 throwing in an
 * all-gather while a survivor was still in the all-reduce before it; the case
 * [Note: an abort does not undo a finished op] left open). So an abort rejects at once the receives
 * from peers that can send nothing more (the dead peer, one whose connection closed or said bye,
 * the sender of a malformed frame). A peer whose connection is open keeps its receives, and new
 * ones may be posted, served from what it sent before it learned of the abort, until its stream
 * ends: with its abort frame (every rank forwards the reason to every open peer as it aborts, so it
 * comes within a round trip), its bye, its close, or `ABORT_DRAIN_MS` after the abort at the latest
 * (a stopped peer forwards nothing). A message that came whole before its receive is served to
 * that receive whenever it is posted, drained or not, from any peer but the one the abort names
 * (the one at fault: what it sent aside is dropped at the abort). Every receive so served checks
 * its op stamp as before the abort: the first drain took the receives posted after the abort as
 * unstamped, so the op's own message failed its check and the seed still failed 1 replay in 50
 * at load 10. Sends reject at once. The op queue's grace then lets a body whose data came complete
 * finish.
 */
export abstract class FramedTransport<P extends FramedPeer> implements Transport {
  abstract readonly kind: 'tcp' | 'ws';
  readonly rank: number;
  readonly size: number;
  /** Connections dropped before a valid hello (wrong token, garbage): counted, never fatal. */
  rejectedConnections = 0;
  protected readonly abortState = new AbortState();
  protected readonly mailbox: Mailbox;
  protected readonly peers: (P | null)[];
  protected readonly pendingSends = new Set<(error: Error) => void>();
  protected readonly maxMessageBytes: number;
  protected phase: 'running' | 'closing' = 'running';
  private closing: Promise<void> | null = null;
  private unsubscribe: () => void = () => {};

  protected constructor(
    store: StoreClient,
    maxMessageBytes: number | undefined,
    makePeer: (rank: number, handler: FrameHandler) => P,
    maxUnexpectedBytes?: number,
  ) {
    this.rank = store.rank;
    this.size = store.worldSize;
    this.maxMessageBytes = maxMessageBytes ?? 2 ** 32;
    const budget = resolveUnexpectedBudget(maxUnexpectedBytes);
    this.mailbox = new Mailbox(this.rank, (reason) => this.abort(reason), budget);
    this.peers = Array.from({ length: this.size }, (_, rank) => {
      if (rank === this.rank) return null;
      const peer: P = makePeer(rank, {
        onHeader: (header) => this.onHeader(peer, header),
        onData: (incoming) => this.mailbox.complete(incoming),
        onControl: (frame, payload) => this.onControl(peer, frame, payload),
        violation: (detail) => this.violation(peer, detail),
      });
      return peer;
    });
    this.abortState.on((reason) => this.onAborted(reason));
  }

  /** Writes one data frame to `target`; settle through `trackSend`. */
  protected abstract transmit(target: P, frame: FrameHeader, data: Uint8Array): Promise<void>;
  /** Drops `peer`'s connection now (after a violation). */
  protected abstract dropPeer(peer: P): void;
  /** Sends the abort frame to every open peer (the transport is still running). */
  protected abstract sendAbort(reason: AbortReason, frame: Uint8Array): void;
  /** Resolves when the abort frames have left, or the medium's flush deadline passed. */
  protected abstract flushAbort(): Promise<void>;
  /** Sends the bye frame to every open peer. */
  protected abstract sendBye(frame: Uint8Array): void;
  /** Closes every connection and listener. */
  protected abstract teardown(): Promise<void>;

  /**
   * Payload bytes that arrived before their receive was posted and were copied aside: a tuning
   * counter (each is an extra copy on the receive path).
   */
  get unexpectedBytes(): number {
    return this.mailbox.unexpectedBytes;
  }

  get abortReason(): AbortReason | null {
    return this.abortState.reason;
  }

  onAbort(listener: (reason: AbortReason) => void): () => void {
    return this.abortState.on(listener);
  }

  abort(reason: AbortReason): void {
    this.abortState.trigger(reason);
  }

  send(peer: number, groupTag: number, data: Uint8Array, stamp?: OpStamp): Promise<void> {
    const tag = groupTag >>> 0;
    const gated = this.gate(peer);
    if (gated !== null) return gated;
    const target = this.peerFor(peer, 'send');
    if (target instanceof Error) return Promise.reject(target);
    const seq = target.sendSeq.get(tag) ?? 0;
    target.sendSeq.set(tag, (seq + 1) >>> 0);
    const frame: FrameHeader = {
      kind: FrameKind.data,
      tag,
      seq,
      length: data.byteLength,
      sender: this.rank,
      stamp,
    };
    return this.transmit(target, frame, data);
  }

  /** Rule 11 of [Note: the transport contract]: the op's early messages are held outside the budget. */
  expect(peer: number, tag: number, stamp: OpStamp, bytes: number, messages: number): () => void {
    return this.mailbox.expect(peer, tag >>> 0, stamp, bytes, messages);
  }

  recv(
    peer: number,
    tag: number,
    dst: Uint8Array,
    onArrive?: () => void,
    stamp?: OpStamp,
  ): Promise<void> {
    // Tags are uint32 on the wire; a negative int32 tag names the same group.
    const wireTag = tag >>> 0;
    if (
      this.abortState.reason !== null &&
      (this.mailbox.isDraining(peer) || this.mailbox.hasArrived(peer, wireTag))
    ) {
      // Served from what `peer` sent before the abort reached it, checked against the receive's
      // op as ever: [Note: draining after an abort].
      return this.mailbox.recv(peer, wireTag, dst, onArrive, stamp);
    }
    const closed = Number.isInteger(peer) ? this.peers[peer] : undefined;
    if (this.abortState.reason === null && closed?.state === 'closed' && closed.byeReceived) {
      // A peer that finished and closed may have sent this message before its bye (a process
      // group posts a receive only once the sender's fingerprint has been checked): a message
      // already here is delivered; one that never came is a lost peer, as in `peerFor`.
      const received = this.mailbox.recv(peer, wireTag, dst, onArrive, stamp);
      if (this.mailbox.hasPending(peer)) this.peerFor(peer, 'recv');
      return received;
    }
    const gated = this.gate(peer);
    if (gated !== null) return gated;
    const source = this.peerFor(peer, 'recv');
    if (source instanceof Error) return Promise.reject(source);
    return this.mailbox.recv(peer, wireTag, dst, onArrive, stamp);
  }

  close(): Promise<void> {
    if (this.closing === null) {
      this.phase = 'closing';
      this.closing = this.shutdown();
    }
    return this.closing;
  }

  /** A rejection a send or receive naming `peer` must wait for (ws: a blame look-up), or null. */
  protected gate(_peer: number): Promise<never> | null {
    return null;
  }

  /**
   * Runs one write and settles like a send. While running, a failed write means the connection
   * is going down, and the close that follows aborts the transport with the peer named, or with
   * the reason an abort frame brought first; the send then rejects with that. Rejecting at once
   * would hand the process group a bare `write ECONNRESET`.
   */
  protected trackSend(start: (done: (error?: Error | null) => void) => void): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.pendingSends.add(reject);
      start((error) => {
        if (error && this.phase === 'running' && this.abortState.reason === null) return;
        if (!this.pendingSends.delete(reject)) return;
        if (error) {
          const reason = this.abortState.reason;
          reject(reason === null ? error : new TransportAbortedError(reason));
        } else resolve();
      });
    });
  }

  protected peerFor(peer: number, op: string): P | Error {
    const reason = this.abortState.reason;
    if (reason !== null) return new TransportAbortedError(reason);
    const target = Number.isInteger(peer) ? this.peers[peer] : undefined;
    if (target === undefined || target === null) {
      return new TransportAbortedError({
        kind: 'error',
        origin: this.rank,
        message: `[${op}] rank ${this.rank} cannot use rank ${peer} as a peer in a world of ${this.size}`,
      });
    }
    if (target.state !== 'open') {
      this.abort({
        kind: 'peer-lost',
        origin: this.rank,
        peer,
        message: `rank ${peer} is gone: it closed its ${this.kind} transport before rank ${this.rank}'s ${op}`,
      });
      return new TransportAbortedError(this.abortState.reason!);
    }
    return target;
  }

  /** Declares a rank lost when the store reports it gone. */
  protected watchStore(store: StoreClient): void {
    this.unsubscribe = store.onRankLost((rank) => {
      const peer = this.peers[rank];
      if (peer) this.peerDied(peer, 'it left the rendezvous store');
    });
  }

  /** Waits until no peer is connecting; `poll` runs on every check. */
  protected async waitForPeers(timeoutMs: number, poll: () => void = () => {}): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    const connecting = () => this.peers.filter((p) => p !== null && p.state === 'connecting');
    while (connecting().length > 0) {
      poll();
      if (this.abortState.reason !== null) throw new TransportAbortedError(this.abortState.reason);
      const missing = connecting().map((p) => p!.rank);
      if (Date.now() > deadline && missing.length > 0) {
        throw new RendezvousError(
          this.kind,
          `timed out after ${timeoutMs} ms connecting to ranks ${missing.join(', ')}`,
          { rank: this.rank, code: 'E_TIMEOUT', missingRanks: missing },
        );
      }
      await sleep(2);
    }
  }

  /** A header from `peer`: validated, then where its payload goes. */
  private onHeader(peer: P, bytes: Uint8Array): PayloadPlan {
    const header = readHeader(bytes, this.maxMessageBytes);
    if (typeof header === 'string') return this.violation(peer, header);
    // A data frame's sender is part of its op's identity, checked where it meets its receive
    // ([Note: op stamps]); any other frame must come from its connection's peer.
    if (header.sender !== peer.rank && header.kind !== FrameKind.data) {
      return this.violation(peer, `frame claims to come from rank ${header.sender}`);
    }
    switch (header.kind) {
      case FrameKind.data: {
        const expected = peer.recvSeq.get(header.tag) ?? 0;
        if (header.seq !== expected) {
          return this.violation(
            peer,
            `frame ${header.seq} on tag ${header.tag} out of order (expected ${expected})`,
          );
        }
        peer.recvSeq.set(header.tag, (expected + 1) >>> 0);
        const { tag, length, stamp, sender } = header;
        const incoming = this.mailbox.begin(peer.rank, tag, length, stamp, sender);
        if (incoming === null) return { kind: 'stop' };
        if (header.length > 0) return { kind: 'data', incoming };
        this.mailbox.complete(incoming);
        return { kind: 'none' };
      }
      case FrameKind.abort:
        if (header.length === 0) return this.violation(peer, 'empty abort frame');
        return { kind: 'control', frame: header, buffer: new Uint8Array(header.length) };
      case FrameKind.bye:
        peer.byeReceived = true;
        this.mailbox.endDrain(peer.rank);
        if (peer.state === 'open') peer.state = 'closed';
        if (this.mailbox.hasPending(peer.rank)) {
          this.abort({
            kind: 'peer-lost',
            origin: this.rank,
            peer: peer.rank,
            message: `rank ${peer.rank} closed its transport while rank ${this.rank} was still receiving from it`,
          });
        }
        return { kind: 'none' };
      default:
        return this.otherFrame(peer, header);
    }
  }

  /** A frame kind other than data, abort and bye (ws: relaying); a violation by default. */
  protected otherFrame(peer: P, header: FrameHeader): PayloadPlan {
    return this.violation(peer, `unexpected ${frameKindName(header.kind)} frame`);
  }

  /** The whole payload of a control frame `otherFrame` asked for. */
  protected otherControl(_peer: P, _frame: FrameHeader, _payload: Uint8Array): void {}

  private onControl(peer: P, frame: FrameHeader, payload: Uint8Array): void {
    if (frame.kind !== FrameKind.abort) {
      this.otherControl(peer, frame, payload);
      return;
    }
    let reason: unknown;
    try {
      reason = JSON.parse(new TextDecoder().decode(payload));
    } catch {
      this.violation(peer, 'abort frame is not JSON');
      return;
    }
    const valid = validReason(reason);
    if (valid === null) {
      this.violation(peer, 'abort frame has no valid reason');
      return;
    }
    this.abort(valid);
    // Its abort frame is the last thing `peer` sends: [Note: draining after an abort].
    this.mailbox.endDrain(peer.rank);
  }

  /** `peer` broke the protocol: abort naming it, read nothing more from it, drop it. */
  protected violation(peer: P, detail: string): PayloadPlan {
    peer.reader.stop();
    this.abort({
      kind: 'error',
      origin: this.rank,
      peer: peer.rank,
      message: `[${this.kind}] rank ${this.rank}: malformed frame from rank ${peer.rank}: ${detail}`,
    });
    this.mailbox.endDrain(peer.rank);
    this.dropPeer(peer);
    return { kind: 'stop' };
  }

  /** `peer`'s connection is gone (`how`); unless it said bye first, it is lost. */
  protected peerDied(peer: P, how: string): void {
    this.mailbox.endDrain(peer.rank);
    if (this.phase === 'closing' || peer.state === 'closed' || peer.byeReceived) return;
    const wasLive = peer.state === 'open' || peer.state === 'connecting';
    peer.state = 'dead';
    if (!wasLive) return;
    this.blame(peer, {
      kind: 'peer-lost',
      origin: this.rank,
      peer: peer.rank,
      message: `rank ${peer.rank} is gone: ${how} (seen by rank ${this.rank} over ${this.kind})`,
    });
  }

  /** Aborts with `lost` for a peer that died (ws first looks up what the peer published). */
  protected blame(_peer: P, lost: AbortReason): void {
    this.abort(lost);
  }

  private onAborted(reason: AbortReason): void {
    // The peers that may still have sent something before the abort reached them.
    const draining =
      this.phase === 'closing'
        ? []
        : this.peers
            .filter((p) => p !== null && p.state === 'open' && p.rank !== reason.peer)
            .map((p) => p!.rank);
    this.mailbox.abort(reason, draining);
    if (draining.length > 0) setTimeout(() => this.endDrains(), ABORT_DRAIN_MS).unref?.();
    const error = new TransportAbortedError(reason);
    for (const reject of this.pendingSends) reject(error);
    this.pendingSends.clear();
    if (this.phase === 'closing') return;
    this.sendAbort(reason, controlFrame(FrameKind.abort, this.rank, JSON.stringify(reason)));
  }

  /** Whether closing still waits for `peer`'s bye (tcp: not once its socket is gone). */
  protected awaitsBye(peer: P): boolean {
    return peer.state === 'open' && !peer.byeReceived;
  }

  /** Every peer's stream has ended for its receives ([Note: draining after an abort]). */
  private endDrains(): void {
    for (const peer of this.peers) if (peer !== null) this.mailbox.endDrain(peer.rank);
  }

  private async shutdown(): Promise<void> {
    const wasAborted = this.abortState.reason !== null;
    this.endDrains();
    this.abortState.trigger({
      kind: 'user',
      origin: this.rank,
      message: `rank ${this.rank} closed its ${this.kind} transport`,
    });
    if (wasAborted) {
      // The abort frames (`onAborted`) may still sit in the connections' buffers: closing now
      // would drop them and leave the peers to guess who failed.
      await this.flushAbort();
    } else {
      this.sendBye(controlFrame(FrameKind.bye, this.rank));
      const deadline = Date.now() + BYE_WAIT_MS;
      while (Date.now() < deadline && this.peers.some((p) => p !== null && this.awaitsBye(p))) {
        await sleep(5);
      }
    }
    this.unsubscribe();
    await this.teardown();
  }
}
