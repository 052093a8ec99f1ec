import { loadNodeChannels } from '#platform';
import { type AbortReason, TransportAbortedError } from '../../errors.js';
import { RendezvousError } from '../../rendezvous/errors.js';
import { publishedBy } from '../../rendezvous/published-by.js';
import type { StoreClient } from '../../rendezvous/store-client.js';
import { type PreAuthLimits, preAuthLimits } from '../../pre-auth-limits.js';
import { AbortState, type Transport } from '../../transport.js';
import {
  type Channel,
  type ChannelFactory,
  type Listener,
  nativeChannels,
  type WsTlsOptions,
} from './channel.js';
import {
  decodeHello,
  encodeFrame,
  encodeHello,
  type FrameHeader,
  FrameKind,
  frameKindName,
  HEADER_BYTES,
  readHeader,
  writeHeader,
} from './frame.js';
import { type Incoming, Inbox } from './inbox.js';

/** Options of the `ws` transport. */
export interface WsTransportOptions {
  /** The joined rendezvous store; URLs are exchanged through it. */
  store: StoreClient;
  /** The join token; connections without it are dropped. */
  token: string;
  /**
   * Accept connections from other ranks (default: true in Node, false in browsers, which
   * cannot). Two ranks that both cannot listen cannot be connected.
   */
  listen?: boolean;
  /** Address to listen on and advertise (default `127.0.0.1`). */
  host?: string;
  /** Largest data message accepted, in bytes (default 2^32). */
  maxMessageBytes?: number;
  /** Store key prefix (default `ws`). */
  prefix?: string;
  /** Deadline for connecting to every peer (default: the store's timeout). */
  timeoutMs?: number;
  /**
   * Node: listen on `wss://` with `cert` and `key`, dial only `wss://` peers, trust `ca` (see
   * [Note: ws over TLS]). Browsers dial the `wss://` URLs with their own trust store.
   */
  tls?: WsTlsOptions;
  /** Overrides how channels are made (tests; custom WebSocket implementations). */
  channels?: ChannelFactory;
  /** Limits on connections before their hello checks out (see [Note: strangers on a port]). */
  preAuth?: PreAuthLimits;
}

type PeerState = 'connecting' | 'open' | 'closed' | 'dead';

type Expect =
  | { kind: 'header' }
  | { kind: 'payload'; header: FrameHeader; incoming: Incoming | null };

class WsPeer {
  state: PeerState = 'connecting';
  channel: Channel | null = null;
  readonly sendSeq = new Map<number, number>();
  readonly recvSeq = new Map<number, number>();
  readonly freeHeaders: Uint8Array[] = [];
  expect: Expect = { kind: 'header' };
  byeReceived = false;
  stopped = false;
  /** The rank that relays this pair's frames when neither side can listen (two browsers). */
  via: WsPeer | null = null;
  /**
   * Relay only: frames relayed to this rank before it connected here, sent once it does (see
   * [Note: relaying to a rank still connecting]).
   */
  relayBacklog: Uint8Array[] = [];
  constructor(readonly rank: number) {}
}

const BYE_WAIT_MS = 2000;
/** How long an aborted transport lets its abort frames drain before closing (see `shutdown`). */
const ABORT_FLUSH_MS = 500;

/** How long a rank looks up a lost peer's published abort reason before blaming the peer. */
const BLAME_LOOKUP_MS = 500;

function noop(): void {}

const REASON_KINDS = ['timeout', 'mismatch', 'peer-lost', 'user', 'error'];

/** `value` as an abort reason, or null when it is not one (a peer's frame, the store's value). */
function validReason(value: unknown): AbortReason | null {
  const r = value as Partial<AbortReason> | null;
  if (
    typeof r !== 'object' ||
    r === null ||
    !REASON_KINDS.includes(r.kind as string) ||
    !Number.isInteger(r.origin) ||
    typeof r.message !== 'string'
  ) {
    return null;
  }
  return r as AbortReason;
}

function isNode(): boolean {
  return typeof process !== 'undefined' && typeof process.versions?.node === 'string';
}

/**
 * [Note: ws over TLS]
 * With `tls` (the rendezvous' option, so `initProcessGroup({ backend: 'ws', tls })` covers the
 * store and the data connections alike), every Node rank serves its listener over HTTPS and
 * advertises a `wss://` URL; the certificate must be valid for the address the rank advertises
 * (`host` / `WEBSHARD_HOST_ADDR`, 127.0.0.1 on one machine) and signed by a CA every rank trusts
 * (`tls.ca`, else Node's default CAs). A rank with `tls` dials only `wss://` URLs: a peer started
 * without TLS is refused before the hello, so the join token never crosses the network in the
 * clear. The token check, frames and relaying are the same as without TLS; TLS costs a handshake
 * per pair and encryption on the data path (the tcp transport has no TLS).
 */
async function defaultChannels(tls: WsTlsOptions | undefined): Promise<ChannelFactory> {
  if (isNode()) {
    const nodeChannels = await loadNodeChannels();
    return nodeChannels(tls);
  }
  const native = (globalThis as { WebSocket?: unknown }).WebSocket;
  return nativeChannels(native as Parameters<typeof nativeChannels>[0]);
}

/**
 * The `ws` transport: one WebSocket per pair of ranks, binary messages, for processes on one or
 * many machines and for browsers (which join with the native `WebSocket`; this module imports no
 * Node module at its top level).
 *
 * [Note: ws connections]
 * Every rank that can listen (Node) publishes its URL in the store; a browser publishes none. For
 * a pair i < j, j dials i when i listens, else i dials j. Two browsers talk through the lowest
 * listening rank (normally rank 0, which hosts the store and so runs in Node): a `relay` frame
 * carries the whole inner frame to it, and it passes the frame on unchanged behind a `relayed`
 * header, so the receiver validates it as if it came straight from the sender. The dialer says
 * hello (rank, world size, token) and the listener answers with its own hello once the token checks
 * out. Frames are those of the tcp transport ([Note: network frames]): the 32-byte header as one
 * message, then a non-empty payload as the next, so the payload is sent from the caller's view
 * without a copy. Node clients mask with zeros, which lets `ws` skip masking.
 */
export class WsTransport implements Transport {
  readonly kind = 'ws';
  readonly rank: number;
  readonly size: number;
  /** Connections dropped before a valid hello (wrong token, garbage): counted, never fatal. */
  rejectedConnections = 0;
  private readonly abortState = new AbortState();
  private readonly inbox: Inbox;
  private readonly peers: (WsPeer | null)[];
  private readonly pendingSends = new Set<(error: Error) => void>();
  private readonly maxMessageBytes: number;
  private phase: 'running' | 'closing' = 'running';
  private closing: Promise<void> | null = null;
  private listener: Listener | null = null;
  private channels: ChannelFactory | null = null;
  private unsubscribe: () => void = () => {};
  /** Settles once the abort frames of `onAborted` have left (their send callbacks ran). */
  private abortFramesSent: Promise<void> = Promise.resolve();
  /** Settles once this rank's abort reason is in the store (see [Note: blaming a rank that left]). */
  private abortPublished: Promise<void> = Promise.resolve();
  /** Set while a lost peer's published reason is looked up; the abort follows when it settles. */
  private blaming: Promise<void> | null = null;

  private constructor(private readonly options: WsTransportOptions) {
    this.rank = options.store.rank;
    this.size = options.store.worldSize;
    this.maxMessageBytes = options.maxMessageBytes ?? 2 ** 32;
    this.inbox = new Inbox(this.rank, (reason) => this.abort(reason));
    this.peers = Array.from({ length: this.size }, (_, rank) =>
      rank === this.rank ? null : new WsPeer(rank),
    );
    this.abortState.on((reason) => this.onAborted(reason));
  }

  /** Listens (where it can), publishes its URL, connects every pair and waits until all are open. */
  static async create(options: WsTransportOptions): Promise<WsTransport> {
    const transport = new WsTransport(options);
    try {
      await transport.connectAll();
    } catch (error) {
      await transport.close();
      throw error;
    }
    return transport;
  }

  /**
   * Payload bytes that arrived before their receive was posted and were copied aside: a tuning
   * counter (each is an extra copy on the receive path).
   */
  get unexpectedBytes(): number {
    return this.inbox.unexpectedBytes;
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

  send(peer: number, groupTag: number, data: Uint8Array): Promise<void> {
    const tag = groupTag >>> 0;
    const blamed = this.afterBlame(peer);
    if (blamed !== null) return blamed;
    const target = this.peerFor(peer, 'send');
    if (target instanceof Error) return Promise.reject(target);
    const seq = target.sendSeq.get(tag) ?? 0;
    target.sendSeq.set(tag, (seq + 1) >>> 0);
    const frame = { kind: FrameKind.data, tag, seq, length: data.byteLength, sender: this.rank };
    if (target.via !== null) return this.sendRelayed(target, frame, data);
    const channel = target.channel!;
    const header = target.freeHeaders.pop() ?? new Uint8Array(HEADER_BYTES);
    writeHeader(header, frame);
    return new Promise<void>((resolve, reject) => {
      this.pendingSends.add(reject);
      let outstanding = data.byteLength === 0 ? 1 : 2;
      let failed: Error | undefined;
      const done = (error?: Error) => {
        failed ??= error;
        if (--outstanding > 0) return;
        target.freeHeaders.push(header);
        if (failed !== undefined && this.holdFailedSend()) return;
        if (!this.pendingSends.delete(reject)) return;
        if (failed !== undefined) reject(this.abortErrorOr(failed));
        else resolve();
      };
      channel.send(header, done);
      if (data.byteLength > 0) channel.send(data, done);
    });
  }

  /**
   * A frame for a peer reached through a relay: one `relay` header naming the destination, then
   * the whole inner frame as one message (a copy: this is the browser-to-browser path).
   */
  private sendRelayed(target: WsPeer, frame: FrameHeader, data: Uint8Array): Promise<void> {
    const inner = new Uint8Array(HEADER_BYTES + data.byteLength);
    writeHeader(inner, frame);
    inner.set(data, HEADER_BYTES);
    const outer = new Uint8Array(HEADER_BYTES);
    writeHeader(outer, {
      kind: FrameKind.relay,
      tag: target.rank,
      seq: 0,
      length: inner.byteLength,
      sender: this.rank,
    });
    const channel = target.via!.channel!;
    return new Promise<void>((resolve, reject) => {
      this.pendingSends.add(reject);
      channel.send(outer);
      channel.send(inner, (error) => {
        if (error && this.holdFailedSend()) return;
        if (!this.pendingSends.delete(reject)) return;
        if (error) reject(this.abortErrorOr(error));
        else resolve();
      });
    });
  }

  recv(peer: number, tag: number, dst: Uint8Array, onArrive?: () => void): Promise<void> {
    // Tags are uint32 on the wire; a negative int32 tag names the same group.
    const wireTag = tag >>> 0;
    const closed = Number.isInteger(peer) ? this.peers[peer] : undefined;
    if (this.abortState.reason === null && closed?.state === 'closed' && closed.byeReceived) {
      // A message that came before the peer's bye is still delivered (see TcpTransport.recv).
      const received = this.inbox.post(peer, wireTag, dst, onArrive);
      if (this.inbox.hasPending(peer)) this.peerFor(peer, 'recv');
      return received;
    }
    const blamed = this.afterBlame(peer);
    if (blamed !== null) return blamed;
    const source = this.peerFor(peer, 'recv');
    if (source instanceof Error) return Promise.reject(source);
    return this.inbox.post(peer, wireTag, dst, onArrive);
  }

  close(): Promise<void> {
    if (this.closing === null) {
      this.phase = 'closing';
      this.closing = this.shutdown();
    }
    return this.closing;
  }

  /**
   * Whether a send whose write failed stays pending: while running, a failed write means the
   * connection is going down, and the close that follows aborts the transport with the peer
   * named (rule 6), or with the reason an abort frame brought first; the send then rejects with
   * that. Rejecting at once would hand the process group a bare `write ECONNRESET`.
   */
  private holdFailedSend(): boolean {
    return this.phase === 'running' && this.abortState.reason === null;
  }

  private abortErrorOr(error: Error): Error {
    const reason = this.abortState.reason;
    return reason === null ? error : new TransportAbortedError(reason);
  }

  private peerFor(peer: number, op: string): WsPeer | Error {
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
        message: `rank ${peer} is gone: it closed its ws transport before rank ${this.rank}'s ${op}`,
      });
      return new TransportAbortedError(this.abortState.reason!);
    }
    return target;
  }

  private async connectAll(): Promise<void> {
    const { store } = this.options;
    const prefix = this.options.prefix ?? 'ws';
    const timeoutMs = this.options.timeoutMs ?? store.timeoutMs;
    const channels = this.options.channels ?? (await defaultChannels(this.options.tls));
    this.channels = channels;
    const canListen = (this.options.listen ?? isNode()) && channels.listen !== undefined;
    if (canListen) {
      this.listener = await channels.listen!(
        this.options.host ?? '127.0.0.1',
        this.maxMessageBytes,
        (channel) => this.accept(channel),
        {
          expectedConnections: this.size,
          ...(this.options.preAuth !== undefined ? { preAuth: this.options.preAuth } : {}),
        },
      );
    }
    await store.set(`${prefix}/url/${this.rank}`, JSON.stringify(this.listener?.url ?? null));
    this.unsubscribe = store.onRankLost((rank) => {
      const peer = this.peers[rank];
      if (peer) this.peerDied(peer, 'it left the rendezvous store');
    });
    const urls = await Promise.all(
      this.peers.map(async (peer) =>
        peer === null
          ? (this.listener?.url ?? null)
          : (JSON.parse(
              await publishedBy(store, `${prefix}/url/${peer.rank}`, peer.rank, timeoutMs, 'ws'),
            ) as string | null),
      ),
    );
    const relay = urls.findIndex((url) => url !== null);
    await Promise.all(
      this.peers.map(async (peer) => {
        if (peer === null) return;
        const [low, high] = peer.rank < this.rank ? [peer.rank, this.rank] : [this.rank, peer.rank];
        const lowListens = urls[low] !== null;
        if (!lowListens && urls[high] === null) {
          if (relay < 0) {
            throw new RendezvousError(
              'ws',
              `no rank accepts connections (all are browsers?): ranks ${this.rank} and ${peer.rank} cannot be connected`,
              { rank: this.rank },
            );
          }
          peer.via = this.peers[relay]!;
          return;
        }
        if (lowListens ? this.rank !== high : this.rank !== low) return;
        const channel = await channels.dial(urls[peer.rank]!);
        this.attach(peer, channel, 'dialed');
        channel.send(
          encodeFrame(
            { kind: FrameKind.hello, tag: 0, seq: 0, sender: this.rank },
            encodeHello(this.rank, this.size, this.options.token),
          ),
        );
      }),
    );
    const deadline = Date.now() + timeoutMs;
    while (this.peers.some((peer) => peer !== null && peer.state === 'connecting')) {
      for (const peer of this.peers) {
        if (peer?.via?.state === 'open' && peer.state === 'connecting') peer.state = 'open';
      }
      if (this.abortState.reason !== null) throw new TransportAbortedError(this.abortState.reason);
      if (Date.now() > deadline) {
        const missing = this.peers.filter((p) => p !== null && p.state === 'connecting');
        throw new RendezvousError(
          'ws',
          `timed out after ${timeoutMs} ms connecting to ranks ${missing.map((p) => p!.rank).join(', ')}`,
          { rank: this.rank, code: 'E_TIMEOUT', missingRanks: missing.map((p) => p!.rank) },
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  }

  /** Wires a channel to a known peer: after the hello exchange, messages go to `onMessage`. */
  private attach(peer: WsPeer, channel: Channel, side: 'dialed' | 'accepted'): void {
    peer.channel = channel;
    channel.onMessage = (bytes) => {
      if (peer.state === 'connecting' && side === 'dialed') {
        const hello = this.parseHello(bytes);
        if (hello === undefined || hello.rank !== peer.rank) {
          this.violation(peer, 'bad hello answer');
          return;
        }
        peer.state = 'open';
        return;
      }
      this.onMessage(peer, bytes);
    };
    channel.onClose = (detail) => this.peerDied(peer, detail);
  }

  private parseHello(bytes: Uint8Array | string): { rank: number; token: Uint8Array } | undefined {
    if (typeof bytes === 'string') return undefined;
    const header = readHeader(bytes, 0);
    if (typeof header === 'string' || header.kind !== FrameKind.hello) return undefined;
    if (bytes.byteLength !== HEADER_BYTES + header.length) return undefined;
    const hello = decodeHello(bytes.subarray(HEADER_BYTES));
    if (typeof hello === 'string' || hello.size !== this.size || hello.rank !== header.sender) {
      return undefined;
    }
    return hello;
  }

  /** An incoming connection: the first message must be a hello with the right token. */
  private accept(channel: Channel): void {
    const deadline = preAuthLimits(this.options.preAuth).handshakeTimeoutMs;
    const timer = setTimeout(() => reject(), deadline);
    const reject = () => {
      clearTimeout(timer);
      this.rejectedConnections++;
      channel.onMessage = () => {};
      channel.onClose = () => {};
      channel.destroy();
    };
    channel.onClose = () => clearTimeout(timer);
    channel.onMessage = (bytes) => {
      const hello = this.parseHello(bytes);
      const peer = hello === undefined ? undefined : this.peers[hello.rank];
      if (
        hello === undefined ||
        peer === undefined ||
        peer === null ||
        peer.channel !== null ||
        !this.channels!.tokenMatches!(hello.token, this.options.token)
      ) {
        reject();
        return;
      }
      clearTimeout(timer);
      channel.authenticated?.();
      this.attach(peer, channel, 'accepted');
      channel.send(
        encodeFrame(
          { kind: FrameKind.hello, tag: 0, seq: 0, sender: this.rank },
          encodeHello(this.rank, this.size, ''),
        ),
      );
      peer.state = 'open';
      for (const message of peer.relayBacklog) channel.send(message);
      peer.relayBacklog = [];
    };
  }

  private onMessage(peer: WsPeer, bytes: Uint8Array | string): void {
    if (peer.stopped) return;
    if (typeof bytes === 'string') {
      this.violation(peer, 'text message');
      return;
    }
    const expect = peer.expect;
    if (expect.kind === 'payload') {
      peer.expect = { kind: 'header' };
      if (bytes.byteLength !== expect.header.length) {
        this.violation(
          peer,
          `payload of ${bytes.byteLength} bytes after a header announcing ${expect.header.length}`,
        );
        return;
      }
      if (expect.header.kind === FrameKind.abort) {
        this.onAbortFrame(peer, bytes);
        return;
      }
      if (expect.header.kind === FrameKind.relay) {
        this.forward(peer, expect.header.tag, bytes);
        return;
      }
      if (expect.header.kind === FrameKind.relayed) {
        this.deliverRelayed(this.peers[expect.header.tag]!, bytes);
        return;
      }
      expect.incoming!.target.set(bytes);
      this.inbox.complete(expect.incoming!);
      return;
    }
    if (bytes.byteLength !== HEADER_BYTES) {
      this.violation(peer, `expected a ${HEADER_BYTES}-byte header, got ${bytes.byteLength} bytes`);
      return;
    }
    const header = readHeader(bytes, this.maxMessageBytes);
    if (typeof header === 'string') {
      this.violation(peer, header);
      return;
    }
    if (header.sender !== peer.rank) {
      this.violation(peer, `frame claims to come from rank ${header.sender}`);
      return;
    }
    switch (header.kind) {
      case FrameKind.data: {
        const expected = peer.recvSeq.get(header.tag) ?? 0;
        if (header.seq !== expected) {
          this.violation(
            peer,
            `frame ${header.seq} on tag ${header.tag} out of order (expected ${expected})`,
          );
          return;
        }
        peer.recvSeq.set(header.tag, (expected + 1) >>> 0);
        const incoming = this.inbox.begin(peer.rank, header.tag, header.length);
        if (incoming === null) {
          peer.stopped = true;
          return;
        }
        if (header.length === 0) this.inbox.complete(incoming);
        else peer.expect = { kind: 'payload', header, incoming };
        return;
      }
      case FrameKind.abort:
        if (header.length === 0) {
          this.violation(peer, 'empty abort frame');
          return;
        }
        peer.expect = { kind: 'payload', header, incoming: null };
        return;
      case FrameKind.bye:
        peer.byeReceived = true;
        if (peer.state === 'open') peer.state = 'closed';
        if (this.inbox.hasPending(peer.rank)) {
          this.abort({
            kind: 'peer-lost',
            origin: this.rank,
            peer: peer.rank,
            message: `rank ${peer.rank} closed its transport while rank ${this.rank} was still receiving from it`,
          });
        }
        return;
      case FrameKind.relay:
      case FrameKind.relayed: {
        const other = this.peers[header.tag];
        const ok =
          peer.via === null &&
          other !== undefined &&
          other !== null &&
          other !== peer &&
          (header.kind === FrameKind.relay ? other.via === null : other.via === peer);
        if (!ok) {
          this.violation(
            peer,
            `${frameKindName(header.kind)} frame for rank ${header.tag} is not allowed`,
          );
          return;
        }
        peer.expect = { kind: 'payload', header, incoming: null };
        return;
      }
      default:
        this.violation(peer, `unexpected ${frameKindName(header.kind)} frame`);
    }
  }

  /**
   * This rank relays: pass `frame` from `from` on to `to`, unchanged, behind a `relayed` header.
   *
   * [Note: relaying to a rank still connecting]
   * A rank reached through the relay counts as open as soon as its own link to the relay is, so
   * its first frames (a sub-group's set-up, say) may reach the relay before the destination has
   * connected here. Those wait in the destination's backlog and go out when its hello arrives;
   * if it never connects, the connect deadline fails the group. A closed target still gets frames
   * (the goodbye of the rank relayed to it comes after its own); a dead one gets none.
   */
  private forward(from: WsPeer, to: number, frame: Uint8Array): void {
    const target = this.peers[to];
    if (!target || target.state === 'dead') return;
    const header = new Uint8Array(HEADER_BYTES);
    writeHeader(header, {
      kind: FrameKind.relayed,
      tag: from.rank,
      seq: 0,
      length: frame.byteLength,
      sender: this.rank,
    });
    if (target.channel === null) {
      target.relayBacklog.push(header, frame);
      return;
    }
    target.channel.send(header);
    target.channel.send(frame);
  }

  /** A frame `source` sent through the relay: handled as if it came on a channel from `source`. */
  private deliverRelayed(source: WsPeer, frame: Uint8Array): void {
    if (frame.byteLength < HEADER_BYTES) {
      this.violation(source, `relayed frame of ${frame.byteLength} bytes has no header`);
      return;
    }
    const header = frame.subarray(0, HEADER_BYTES);
    const parsed = readHeader(header, this.maxMessageBytes);
    if (typeof parsed !== 'string' && parsed.length !== frame.byteLength - HEADER_BYTES) {
      this.violation(
        source,
        `relayed frame announces ${parsed.length} bytes but carries ${frame.byteLength - HEADER_BYTES}`,
      );
      return;
    }
    this.onMessage(source, header);
    if (frame.byteLength > HEADER_BYTES && source.expect.kind === 'payload') {
      this.onMessage(source, frame.subarray(HEADER_BYTES));
    }
  }

  private onAbortFrame(peer: WsPeer, payload: Uint8Array): void {
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
  }

  private violation(peer: WsPeer, detail: string): void {
    peer.stopped = true;
    this.abort({
      kind: 'error',
      origin: this.rank,
      peer: peer.rank,
      message: `[ws] rank ${this.rank}: malformed frame from rank ${peer.rank}: ${detail}`,
    });
    peer.channel?.destroy();
  }

  private peerDied(peer: WsPeer, how: string): void {
    if (this.phase === 'closing' || peer.state === 'closed' || peer.byeReceived) return;
    const wasLive = peer.state === 'open' || peer.state === 'connecting';
    peer.state = 'dead';
    if (!wasLive) return;
    const lost: AbortReason = {
      kind: 'peer-lost',
      origin: this.rank,
      peer: peer.rank,
      message: `rank ${peer.rank} is gone: ${how} (seen by rank ${this.rank} over ws)`,
    };
    if (this.abortState.reason !== null) return;
    const blaming = this.publishedReason(peer.rank).then((published) => {
      if (this.blaming === blaming) this.blaming = null;
      this.abort(published ?? lost);
    });
    this.blaming = blaming;
  }

  /**
   * [Note: blaming a rank that left]
   * A rank that aborts (it saw a death, a deadline, a mismatch) sends its reason to its peers in
   * abort frames and also puts it in the store under `<prefix>/abort/<rank>`, before it closes
   * anything; closing waits (at most 500 ms) for both to leave. A rank that then sees that rank's
   * connection close (or the store report it lost) looks the key up before blaming it: when the
   * leaver published a reason, that reason (which names the rank that really failed) is the
   * group's, as if its abort frame had arrived. The leaver wrote the key before it closed, so the
   * look-up finds it; a rank that died without a word has no key, and is blamed after one store
   * round trip. Without the look-up a survivor that left at once was sometimes named in place of
   * the rank that died (#20 item 4): its abort frame can lose the race with its closing
   * connection. A send or receive naming the lost peer waits for the look-up, so it rejects with
   * the same reason. Where the store itself is gone (rank 0 left), the look-up fails and the
   * leaver is blamed.
   */
  private async publishedReason(rank: number): Promise<AbortReason | null> {
    const { store } = this.options;
    const key = `${this.options.prefix ?? 'ws'}/abort/${rank}`;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const lookUp = (async () => {
      if (!(await store.check([key]))) return null;
      return validReason(JSON.parse(await store.get(key, BLAME_LOOKUP_MS)));
    })();
    const deadline = new Promise<null>((resolve) => {
      timer = setTimeout(() => resolve(null), BLAME_LOOKUP_MS);
    });
    try {
      return await Promise.race([lookUp, deadline]);
    } catch {
      return null;
    } finally {
      clearTimeout(timer);
    }
  }

  /** When `peer` is dead and its blame is being looked up: the rejection that follows it. */
  private afterBlame(peer: number): Promise<never> | null {
    const blaming = this.blaming;
    if (blaming === null || this.abortState.reason !== null) return null;
    if (!Number.isInteger(peer) || this.peers[peer]?.state !== 'dead') return null;
    return blaming.then(() => Promise.reject(new TransportAbortedError(this.abortState.reason!)));
  }

  private onAborted(reason: AbortReason): void {
    this.inbox.abort(reason);
    const error = new TransportAbortedError(reason);
    for (const reject of this.pendingSends) reject(error);
    this.pendingSends.clear();
    if (this.phase === 'closing') return;
    const text = JSON.stringify(reason);
    // See [Note: blaming a rank that left].
    const key = `${this.options.prefix ?? 'ws'}/abort/${this.rank}`;
    if (reason.kind !== 'user') this.abortPublished = this.options.store.set(key, text).catch(noop);
    const frame = encodeFrame(
      { kind: FrameKind.abort, tag: 0, seq: 0, sender: this.rank },
      new TextEncoder().encode(text),
    );
    const sent: Promise<void>[] = [];
    for (const peer of this.peers) {
      const channel = peer?.channel;
      if (channel && peer.state === 'open') {
        channel.send(frame.subarray(0, HEADER_BYTES));
        sent.push(
          new Promise((resolve) => channel.send(frame.subarray(HEADER_BYTES), () => resolve())),
        );
      }
    }
    this.abortFramesSent = Promise.all(sent).then(noop);
  }

  private async shutdown(): Promise<void> {
    const wasAborted = this.abortState.reason !== null;
    this.abortState.trigger({
      kind: 'user',
      origin: this.rank,
      message: `rank ${this.rank} closed its ws transport`,
    });
    if (wasAborted) {
      // The abort frames (`onAborted`) may still wait behind a large send in the channel's queue,
      // and the reason may not be in the store yet: closing now could make a peer that did not see
      // the failure itself blame this rank for leaving ([Note: blaming a rank that left]).
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        Promise.all([this.abortFramesSent, this.abortPublished]),
        new Promise((resolve) => {
          timer = setTimeout(resolve, ABORT_FLUSH_MS);
        }),
      ]);
      clearTimeout(timer);
    } else {
      const bye = encodeFrame(
        { kind: FrameKind.bye, tag: 0, seq: 0, sender: this.rank },
        new Uint8Array(0),
      );
      for (const peer of this.peers) {
        if (peer?.channel && peer.state === 'open') peer.channel.send(bye);
        if (peer?.via?.channel && peer.state === 'open') {
          const outer = new Uint8Array(HEADER_BYTES);
          writeHeader(outer, {
            kind: FrameKind.relay,
            tag: peer.rank,
            seq: 0,
            length: bye.byteLength,
            sender: this.rank,
          });
          peer.via.channel.send(outer);
          peer.via.channel.send(bye);
        }
      }
      const deadline = Date.now() + BYE_WAIT_MS;
      while (
        Date.now() < deadline &&
        this.peers.some((p) => p !== null && p.state === 'open' && !p.byeReceived)
      ) {
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    }
    this.unsubscribe();
    for (const peer of this.peers) peer?.channel?.destroy();
    await this.listener?.close();
  }
}
