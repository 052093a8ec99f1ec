import { type AbortReason, TransportAbortedError } from '../../errors.js';
import { type PreAuthLimits, preAuthLimits } from '../../pre-auth-limits.js';
import { RendezvousError } from '../../rendezvous/errors.js';
import { publishedBy } from '../../rendezvous/published-by.js';
import type { StoreClient } from '../../rendezvous/store-client.js';
import type { FrameHandler, PayloadPlan } from '../framed/frame-reader.js';
import { FramedPeer, FramedTransport } from '../framed/framed-transport.js';
import { helloFrame, parseHello } from '../framed/hello.js';
import { abortKey, publishedReason } from './published-abort.js';
import { defaultChannels, isNode } from './default-channels.js';
import { relayAllowed, relayedFrameProblem, relayHeader } from './relay.js';
import type { Channel, ChannelFactory, Listener, WsTlsOptions } from './channel.js';
import {
  type FrameHeader,
  FrameKind,
  frameKindName,
  HEADER_BYTES,
  writeHeader,
} from '../framed/frame.js';

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
  /**
   * Most payload held per peer that no receive has claimed, in bytes (default
   * `WEBSHARD_MAX_UNEXPECTED_BYTES`, else 256 MiB; [Note: the unexpected-message budget]).
   */
  maxUnexpectedBytes?: number;
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

class WsPeer extends FramedPeer {
  channel: Channel | null = null;
  /** The rank that relays this pair's frames when neither side can listen (two browsers). */
  via: WsPeer | null = null;
  /**
   * Relay only: frames relayed to this rank before it connected here, sent once it does (see
   * [Note: relaying to a rank still connecting]).
   */
  relayBacklog: Uint8Array[] = [];
}

/** How long an aborted transport lets its abort frames drain before closing (see `shutdown`). */
const ABORT_FLUSH_MS = 500;

function noop(): void {}

/**
 * The `ws` transport: one WebSocket per pair of ranks, binary messages, for processes on one or
 * many machines and for browsers (which join with the native `WebSocket`; this module imports no
 * Node module at its top level). The frames and their rules are those of every framed transport
 * ([Note: framed transports]).
 *
 * [Note: ws connections]
 * Every rank that can listen (Node) publishes its URL in the store; a browser publishes none. For
 * a pair i < j, j dials i when i listens, else i dials j. Two browsers talk through the lowest
 * listening rank (normally rank 0, which hosts the store and so runs in Node): a `relay` frame
 * carries the whole inner frame to it, and it passes the frame on unchanged behind a `relayed`
 * header, so the receiver validates it as if it came straight from the sender. The dialer says
 * hello (rank, world size, token) and the listener answers with its own hello once the token checks
 * out. Frames are those of the tcp transport ([Note: network frames]): the 36-byte header as one
 * message, then a non-empty payload as the next ([Note: message boundaries on ws]), so the payload
 * is sent from the caller's view without a copy. Node clients mask with zeros, so neither side
 * spends a pass on masking; Node channels read frames themselves and stream payloads into their
 * destination ([Note: reading WebSocket frames ourselves]).
 */
export class WsTransport extends FramedTransport<WsPeer> {
  readonly kind = 'ws';
  private listener: Listener | null = null;
  private channels: ChannelFactory | null = null;
  /** Settles once the abort frames of `onAborted` have left (their send callbacks ran). */
  private abortFramesSent: Promise<void> = Promise.resolve();
  /** Settles once this rank's abort reason is in the store (see [Note: blaming a rank that left]). */
  private abortPublished: Promise<void> = Promise.resolve();
  /** Set while a lost peer's published reason is looked up; the abort follows when it settles. */
  private blaming: Promise<void> | null = null;

  private constructor(private readonly options: WsTransportOptions) {
    super(
      options.store,
      options.maxMessageBytes,
      (rank: number, handler: FrameHandler) => new WsPeer(rank, handler),
      options.maxUnexpectedBytes,
    );
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

  protected transmit(target: WsPeer, frame: FrameHeader, data: Uint8Array): Promise<void> {
    if (target.via !== null) return this.sendRelayed(target, frame, data);
    const channel = target.channel!;
    const header = target.freeHeaders.pop() ?? new Uint8Array(HEADER_BYTES);
    writeHeader(header, frame);
    return this.trackSend((done) => {
      let outstanding = data.byteLength === 0 ? 1 : 2;
      let failed: Error | undefined;
      const sent = (error?: Error) => {
        failed ??= error;
        if (--outstanding > 0) return;
        target.freeHeaders.push(header);
        done(failed);
      };
      channel.send(header, sent);
      if (data.byteLength > 0) channel.send(data, sent);
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
    const outer = relayHeader(FrameKind.relay, target.rank, inner.byteLength, this.rank);
    const channel = target.via!.channel!;
    return this.trackSend((done) => {
      channel.send(outer);
      channel.send(inner, done);
    });
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
    this.watchStore(store);
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
        channel.send(helloFrame(this.rank, this.size, this.options.token));
      }),
    );
    await this.waitForPeers(timeoutMs, () => {
      for (const peer of this.peers) {
        if (peer?.via?.state === 'open' && peer.state === 'connecting') peer.state = 'open';
      }
    });
  }

  /** Wires a channel to a known peer: after the hello exchange, messages go to its reader. */
  private attach(peer: WsPeer, channel: Channel, side: 'dialed' | 'accepted'): void {
    peer.channel = channel;
    const stream = () => {
      if (channel.stream !== undefined) channel.stream(peer.reader);
      else channel.onMessage = (bytes) => peer.reader.message(bytes);
    };
    if (side === 'dialed') {
      channel.onMessage = (bytes) => {
        const hello = parseHello(bytes, this.size);
        if (hello === undefined || hello.rank !== peer.rank) {
          this.violation(peer, 'bad hello answer');
          return;
        }
        peer.state = 'open';
        stream();
      };
    } else stream();
    channel.onClose = (detail) => this.peerDied(peer, detail);
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
      const hello = parseHello(bytes, this.size);
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
      channel.send(helloFrame(this.rank, this.size, ''));
      peer.state = 'open';
      for (const message of peer.relayBacklog) channel.send(message);
      peer.relayBacklog = [];
    };
  }

  protected override otherFrame(peer: WsPeer, header: FrameHeader): PayloadPlan {
    if (header.kind !== FrameKind.relay && header.kind !== FrameKind.relayed) {
      return super.otherFrame(peer, header);
    }
    const ok = relayAllowed(header.kind, peer, this.peers[header.tag]);
    if (!ok) {
      const detail = `${frameKindName(header.kind)} frame for rank ${header.tag} is not allowed`;
      return this.violation(peer, detail);
    }
    try {
      return { kind: 'control', frame: header, buffer: new Uint8Array(header.length) };
    } catch (error) {
      return this.violation(peer, `cannot hold a frame of ${header.length} bytes: ${error}`);
    }
  }

  protected override otherControl(peer: WsPeer, frame: FrameHeader, payload: Uint8Array): void {
    if (frame.kind === FrameKind.relay) this.forward(peer, frame.tag, payload);
    else this.deliverRelayed(this.peers[frame.tag]!, payload);
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
    const header = relayHeader(FrameKind.relayed, from.rank, frame.byteLength, this.rank);
    if (target.channel === null) {
      target.relayBacklog.push(header, frame);
      return;
    }
    target.channel.send(header);
    target.channel.send(frame);
  }

  /** A frame `source` sent through the relay: read as if it came on a channel from `source`. */
  private deliverRelayed(source: WsPeer, frame: Uint8Array): void {
    const problem = relayedFrameProblem(frame, this.maxMessageBytes);
    if (problem !== null) {
      this.violation(source, problem);
      return;
    }
    const header = frame.subarray(0, HEADER_BYTES);
    source.reader.message(header);
    if (frame.byteLength > HEADER_BYTES && source.reader.expectsPayload) {
      source.reader.message(frame.subarray(HEADER_BYTES));
    }
  }

  protected dropPeer(peer: WsPeer): void {
    peer.channel?.destroy();
  }

  protected override blame(peer: WsPeer, lost: AbortReason): void {
    if (this.abortState.reason !== null) return;
    const { store, prefix = 'ws' } = this.options;
    const blaming = publishedReason(store, prefix, peer.rank).then((published) => {
      if (this.blaming === blaming) this.blaming = null;
      this.abort(published ?? lost);
    });
    this.blaming = blaming;
  }

  /** When `peer` is dead and its blame is being looked up: the rejection that follows it. */
  protected override gate(peer: number): Promise<never> | null {
    const blaming = this.blaming;
    if (blaming === null || this.abortState.reason !== null) return null;
    if (!Number.isInteger(peer) || this.peers[peer]?.state !== 'dead') return null;
    return blaming.then(() => Promise.reject(new TransportAbortedError(this.abortState.reason!)));
  }

  protected sendAbort(reason: AbortReason, frame: Uint8Array): void {
    // See [Note: blaming a rank that left].
    const key = abortKey(this.options.prefix ?? 'ws', this.rank);
    if (reason.kind !== 'user') {
      this.abortPublished = this.options.store.set(key, JSON.stringify(reason)).catch(noop);
    }
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

  /**
   * The abort frames may still wait behind a large send in the channel's queue, and the reason
   * may not be in the store yet: closing now could make a peer that did not see the failure itself
   * blame this rank for leaving ([Note: blaming a rank that left]).
   */
  protected async flushAbort(): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      Promise.all([this.abortFramesSent, this.abortPublished]),
      new Promise((resolve) => {
        timer = setTimeout(resolve, ABORT_FLUSH_MS);
      }),
    ]);
    clearTimeout(timer);
  }

  protected sendBye(bye: Uint8Array): void {
    for (const peer of this.peers) {
      if (peer?.channel && peer.state === 'open') peer.channel.send(bye);
      if (peer?.via?.channel && peer.state === 'open') {
        peer.via.channel.send(relayHeader(FrameKind.relay, peer.rank, bye.byteLength, this.rank));
        peer.via.channel.send(bye);
      }
    }
  }

  protected async teardown(): Promise<void> {
    for (const peer of this.peers) peer?.channel?.destroy();
    await this.listener?.close();
  }
}
