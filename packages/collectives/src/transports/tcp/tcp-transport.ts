import { createHash, timingSafeEqual } from 'node:crypto';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { type AbortReason, TransportAbortedError } from '../../errors.js';
import { RendezvousError } from '../../rendezvous/errors.js';
import { publishedBy } from '../../rendezvous/published-by.js';
import type { StoreClient } from '../../rendezvous/store-client.js';
import { type PreAuthLimits, PreAuthGuard } from '../../pre-auth-guard.js';
import { AbortState, type Transport } from '../../transport.js';
import {
  decodeHello,
  encodeFrame,
  encodeHello,
  FrameKind,
  frameKindName,
  HEADER_BYTES,
  readHeader,
  writeHeader,
} from '../ws/frame.js';
import { type Incoming, Inbox } from '../ws/inbox.js';

/** Options of the `tcp` transport. */
export interface TcpTransportOptions {
  /** The joined rendezvous store; addresses are exchanged through it. */
  store: StoreClient;
  /** The join token; data connections without it are dropped. */
  token: string;
  /** Address to listen on and advertise to the other ranks (default `127.0.0.1`). */
  host?: string;
  /** Largest data message accepted, in bytes (default 2^32): longer frames are hostile. */
  maxMessageBytes?: number;
  /** Store key prefix, to run several transports on one store (default `tcp`). */
  prefix?: string;
  /** Deadline for connecting to every peer (default: the store's timeout). */
  timeoutMs?: number;
  /** Limits on connections before their hello checks out (see [Note: strangers on a port]). */
  preAuth?: PreAuthLimits;
}

type PeerState = 'connecting' | 'open' | 'closed' | 'dead';

type ReaderState =
  | { kind: 'header'; filled: number }
  | { kind: 'payload'; incoming: Incoming; offset: number }
  | { kind: 'control'; frameKind: number; buffer: Uint8Array; offset: number }
  | { kind: 'stopped' };

interface PendingSend {
  reject: (error: Error) => void;
}

/** Small on purpose: payload bytes that land in scratch are copied; the rest is read in place. */
const SCRATCH_BYTES = 32 << 10;
/** Below this many remaining payload bytes a read goes to scratch and is copied (cheaper). */
const DIRECT_READ_MIN = 16 << 10;
const BYE_WAIT_MS = 2000;
/** How long an aborted transport lets its abort frames drain before closing (see `shutdown`). */
const ABORT_FLUSH_MS = 500;
/** How long a closed send socket waits for the same peer's frames on the other socket. */
const PEER_CLOSE_GRACE_MS = 250;

function digest(bytes: Uint8Array | string): Buffer {
  return createHash('sha256').update(bytes).digest();
}

/** One remote rank: a socket we send on (it connected to us) and one we read (we connected). */
class TcpPeer {
  state: PeerState = 'connecting';
  sendSocket: Socket | null = null;
  recvSocket: Socket | null = null;
  readonly sendSeq = new Map<number, number>();
  readonly recvSeq = new Map<number, number>();
  readonly freeHeaders: Buffer[] = [];
  readonly scratch = Buffer.allocUnsafe(SCRATCH_BYTES);
  readonly header = Buffer.allocUnsafe(HEADER_BYTES);
  reader: ReaderState = { kind: 'header', filled: 0 };
  readingDirect = false;
  byeReceived = false;
  constructor(readonly rank: number) {}

  nextSeq(map: Map<number, number>, tag: number): number {
    const seq = map.get(tag) ?? 0;
    map.set(tag, (seq + 1) >>> 0);
    return seq;
  }
}

/**
 * The `tcp` transport: raw `node:net` sockets between Node processes, one per direction per pair
 * of ranks, addresses exchanged through the rendezvous store. Node only.
 *
 * [Note: the tcp data path]
 * Rank A reads from B on the socket A opened to B (and sends to B on the one B opened to A), so
 * every socket we read is one we created, with `onread`: Node reads into a buffer we choose. That
 * buffer is the posted receive's destination while a payload is in flight (the kernel copies
 * straight into it), or a per-peer 32 KiB scratch buffer for headers and small tails. Messages
 * that arrive before their receive go into pooled buffers (`Inbox`). Sends write the 32-byte
 * header (from a per-peer free list) and the caller's view, corked together, with TCP_NODELAY:
 * nothing is copied or allocated per message in steady state. See [Note: network frames] for the
 * header and its validation.
 */
export class TcpTransport implements Transport {
  readonly kind = 'tcp';
  readonly rank: number;
  readonly size: number;
  /** Connections dropped before a valid hello (wrong token, garbage): counted, never fatal. */
  rejectedConnections = 0;
  private readonly abortState = new AbortState();
  private readonly inbox: Inbox;
  private readonly peers: (TcpPeer | null)[];
  private readonly pendingSends = new Set<PendingSend>();
  private readonly tokenDigest: Buffer;
  private readonly maxMessageBytes: number;
  private phase: 'running' | 'closing' = 'running';
  private closing: Promise<void> | null = null;
  private server: Server | null = null;
  /** Holds accepted connections until their hello checks out. */
  readonly guard: PreAuthGuard;
  private unsubscribe: () => void = () => {};

  private constructor(private readonly options: TcpTransportOptions) {
    this.rank = options.store.rank;
    this.size = options.store.worldSize;
    this.tokenDigest = digest(options.token);
    this.guard = new PreAuthGuard(options.preAuth);
    this.maxMessageBytes = options.maxMessageBytes ?? 2 ** 32;
    this.inbox = new Inbox(this.rank, (reason) => this.abort(reason));
    this.peers = Array.from({ length: this.size }, (_, rank) =>
      rank === this.rank ? null : new TcpPeer(rank),
    );
    this.abortState.on((reason) => this.onAborted(reason));
  }

  /**
   * Listens, publishes this rank's address in the store, connects to every other rank and waits
   * until every pair is connected both ways.
   */
  static async create(options: TcpTransportOptions): Promise<TcpTransport> {
    const transport = new TcpTransport(options);
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
    const target = this.peerFor(peer, 'send');
    if (target instanceof Error) return Promise.reject(target);
    const socket = target.sendSocket!;
    const header = target.freeHeaders.pop() ?? Buffer.allocUnsafe(HEADER_BYTES);
    writeHeader(header, {
      kind: FrameKind.data,
      tag,
      seq: target.nextSeq(target.sendSeq, tag),
      length: data.byteLength,
      sender: this.rank,
    });
    return new Promise<void>((resolve, reject) => {
      const pending: PendingSend = { reject };
      this.pendingSends.add(pending);
      const done = (error?: Error | null) => {
        target.freeHeaders.push(header);
        if (error && this.holdFailedSend()) return;
        if (!this.pendingSends.delete(pending)) return;
        if (error) reject(this.abortErrorOr(error));
        else resolve();
      };
      socket.cork();
      if (data.byteLength === 0) {
        socket.write(header, done);
      } else {
        socket.write(header);
        socket.write(data, done);
      }
      socket.uncork();
    });
  }

  recv(peer: number, tag: number, dst: Uint8Array, onArrive?: () => void): Promise<void> {
    // Tags are uint32 on the wire; a negative int32 tag names the same group.
    const wireTag = tag >>> 0;
    const closed = Number.isInteger(peer) ? this.peers[peer] : undefined;
    if (this.abortState.reason === null && closed?.state === 'closed' && closed.byeReceived) {
      // A peer that finished and closed may have sent this message before its bye (a process
      // group posts a receive only once the sender's fingerprint has been checked): a message
      // already here is delivered; one that never came is a lost peer, as in `peerFor`.
      const received = this.inbox.post(peer, wireTag, dst, onArrive);
      if (this.inbox.hasPending(peer)) this.peerFor(peer, 'recv');
      return received;
    }
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

  /** See `WsTransport.holdFailedSend`: a failed write stays pending until the transport aborts. */
  private holdFailedSend(): boolean {
    return this.phase === 'running' && this.abortState.reason === null;
  }

  private abortErrorOr(error: Error): Error {
    const reason = this.abortState.reason;
    return reason === null ? error : new TransportAbortedError(reason);
  }

  private peerFor(peer: number, op: string): TcpPeer | Error {
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
        message: `rank ${peer} is gone: it closed its tcp transport before rank ${this.rank}'s ${op}`,
      });
      return new TransportAbortedError(this.abortState.reason!);
    }
    return target;
  }

  private async connectAll(): Promise<void> {
    const { store } = this.options;
    const prefix = this.options.prefix ?? 'tcp';
    const host = this.options.host ?? '127.0.0.1';
    const timeoutMs = this.options.timeoutMs ?? store.timeoutMs;
    const server = createServer({ noDelay: true }, (socket) => this.accept(socket));
    this.server = server;
    this.guard.capServer(server, this.size);
    server.on('error', () => {});
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const address = server.address();
    const port = typeof address === 'object' && address !== null ? address.port : 0;
    await store.set(`${prefix}/addr/${this.rank}`, JSON.stringify({ host, port }));
    this.unsubscribe = store.onRankLost((rank) => {
      const peer = this.peers[rank];
      if (peer && peer.state !== 'closed') this.peerDied(peer, 'it left the rendezvous store');
    });
    await Promise.all(
      this.peers.map(async (peer) => {
        if (peer === null) return;
        const text = await publishedBy(
          store,
          `${prefix}/addr/${peer.rank}`,
          peer.rank,
          timeoutMs,
          'tcp',
        );
        const { host: peerHost, port: peerPort } = JSON.parse(text) as {
          host: string;
          port: number;
        };
        this.dial(peer, peerHost, peerPort);
      }),
    );
    const deadline = Date.now() + timeoutMs;
    while (this.peers.some((peer) => peer !== null && peer.state === 'connecting')) {
      if (this.abortState.reason !== null) throw new TransportAbortedError(this.abortState.reason);
      if (Date.now() > deadline) {
        const missing = this.peers.filter((p) => p !== null && p.state === 'connecting');
        throw new RendezvousError(
          'tcp',
          `timed out after ${timeoutMs} ms connecting to ranks ${missing.map((p) => p!.rank).join(', ')}`,
          { rank: this.rank, code: 'E_TIMEOUT', missingRanks: missing.map((p) => p!.rank) },
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  }

  /** Opens the socket we read `peer`'s messages from, and says hello on it. */
  private dial(peer: TcpPeer, host: string, port: number): void {
    const socket = connect({
      host,
      port,
      noDelay: true,
      onread: {
        buffer: () => this.nextReadBuffer(peer),
        callback: (nread: number, buffer: Uint8Array) => {
          this.onRead(peer, nread, buffer);
          return true;
        },
      },
    });
    peer.recvSocket = socket;
    socket.setKeepAlive(true, 5000);
    socket.on('error', () => {});
    socket.on('connect', () => {
      socket.write(
        encodeFrame(
          { kind: FrameKind.hello, tag: 0, seq: 0, sender: this.rank },
          encodeHello(this.rank, this.size, this.options.token),
        ),
      );
      this.markOpen(peer);
    });
    socket.on('close', (hadError) => {
      if (peer.recvSocket === socket)
        this.peerDied(peer, hadError ? 'its socket errored' : 'its socket closed');
    });
  }

  /** A connection to our server: it must say hello with the token, then it is our send socket. */
  private accept(socket: Socket): void {
    socket.on('error', () => {});
    socket.setNoDelay(true);
    let buffered = Buffer.alloc(0);
    let peer: TcpPeer | null = null;
    let rejected = false;
    const reject = () => {
      if (peer === null && !rejected) this.rejectedConnections++;
      rejected = true;
      socket.destroy();
    };
    // The guard owns the deadline and the count of strangers; the hello is read here, up to the
    // same byte limit (see [Note: strangers on a port]).
    if (!this.guard.admit(socket, { countBytes: false })) {
      reject();
      return;
    }
    socket.on('data', (chunk: Buffer) => {
      if (peer !== null) {
        this.violation(peer, 'sent data on the socket it should only read');
        return;
      }
      if (rejected) return;
      buffered = Buffer.concat([buffered, chunk]);
      if (buffered.byteLength > this.guard.limits.maxBytes) {
        reject();
        return;
      }
      if (buffered.byteLength < HEADER_BYTES) return;
      const header = readHeader(buffered, 0);
      if (typeof header === 'string' || header.kind !== FrameKind.hello) {
        reject();
        return;
      }
      if (buffered.byteLength < HEADER_BYTES + header.length) return;
      if (buffered.byteLength > HEADER_BYTES + header.length) {
        reject();
        return;
      }
      const hello = decodeHello(buffered.subarray(HEADER_BYTES));
      if (typeof hello === 'string') {
        reject();
        return;
      }
      const given = digest(hello.token);
      const candidate = this.peers[hello.rank];
      if (
        !timingSafeEqual(given, this.tokenDigest) ||
        hello.size !== this.size ||
        hello.rank !== header.sender ||
        candidate === undefined ||
        candidate === null ||
        candidate.sendSocket !== null
      ) {
        return reject();
      }
      this.guard.authenticated(socket);
      peer = candidate;
      peer.sendSocket = socket;
      socket.setKeepAlive(true, 5000);
      socket.on('close', (hadError) => this.sendSocketClosed(candidate, hadError));
      this.markOpen(peer);
    });
    socket.on('close', () => {
      if (peer === null) reject();
    });
  }

  private markOpen(peer: TcpPeer): void {
    if (
      peer.state === 'connecting' &&
      peer.sendSocket !== null &&
      peer.recvSocket?.readyState === 'open'
    ) {
      peer.state = 'open';
    }
  }

  /** Where Node reads `peer`'s next bytes: straight into the payload target, or scratch. */
  private nextReadBuffer(peer: TcpPeer): Uint8Array {
    const reader = peer.reader;
    if (reader.kind === 'payload') {
      const remaining = reader.incoming.target.byteLength - reader.offset;
      if (remaining >= DIRECT_READ_MIN) {
        peer.readingDirect = true;
        return reader.incoming.target.subarray(reader.offset);
      }
    }
    peer.readingDirect = false;
    return peer.scratch;
  }

  private onRead(peer: TcpPeer, nread: number, buffer: Uint8Array): void {
    if (nread <= 0) return;
    const reader = peer.reader;
    if (peer.readingDirect && reader.kind === 'payload' && buffer !== peer.scratch) {
      reader.offset += nread;
      if (reader.offset === reader.incoming.target.byteLength) {
        peer.reader = { kind: 'header', filled: 0 };
        this.inbox.complete(reader.incoming);
      }
      return;
    }
    this.parse(peer, buffer, nread);
  }

  /** Consumes `bytes[0, end)` read into scratch: headers, payload pieces, control frames. */
  private parse(peer: TcpPeer, bytes: Uint8Array, end: number): void {
    let pos = 0;
    while (pos < end) {
      const reader = peer.reader;
      switch (reader.kind) {
        case 'stopped':
          return;
        case 'header': {
          const n = Math.min(HEADER_BYTES - reader.filled, end - pos);
          peer.header.set(bytes.subarray(pos, pos + n), reader.filled);
          reader.filled += n;
          pos += n;
          if (reader.filled === HEADER_BYTES) this.onHeader(peer);
          break;
        }
        case 'payload': {
          const target = reader.incoming.target;
          const n = Math.min(target.byteLength - reader.offset, end - pos);
          target.set(bytes.subarray(pos, pos + n), reader.offset);
          reader.offset += n;
          pos += n;
          if (reader.offset === target.byteLength) {
            peer.reader = { kind: 'header', filled: 0 };
            this.inbox.complete(reader.incoming);
          }
          break;
        }
        case 'control': {
          const n = Math.min(reader.buffer.byteLength - reader.offset, end - pos);
          reader.buffer.set(bytes.subarray(pos, pos + n), reader.offset);
          reader.offset += n;
          pos += n;
          if (reader.offset === reader.buffer.byteLength) {
            peer.reader = { kind: 'header', filled: 0 };
            this.onControl(peer, reader.frameKind, reader.buffer);
          }
          break;
        }
      }
    }
  }

  private onHeader(peer: TcpPeer): void {
    const header = readHeader(peer.header, this.maxMessageBytes);
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
          peer.reader = { kind: 'stopped' };
          return;
        }
        if (header.length === 0) {
          peer.reader = { kind: 'header', filled: 0 };
          this.inbox.complete(incoming);
        } else {
          peer.reader = { kind: 'payload', incoming, offset: 0 };
        }
        return;
      }
      case FrameKind.abort:
        peer.reader = {
          kind: 'control',
          frameKind: header.kind,
          buffer: new Uint8Array(header.length),
          offset: 0,
        };
        if (header.length === 0) this.violation(peer, 'empty abort frame');
        return;
      case FrameKind.bye:
        peer.reader = { kind: 'header', filled: 0 };
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
      default:
        this.violation(peer, `unexpected ${frameKindName(header.kind)} frame`);
        return;
    }
  }

  private onControl(peer: TcpPeer, _kind: number, payload: Uint8Array): void {
    let reason: unknown;
    try {
      reason = JSON.parse(new TextDecoder().decode(payload));
    } catch {
      this.violation(peer, 'abort frame is not JSON');
      return;
    }
    const r = reason as Partial<AbortReason> | null;
    const kinds = ['timeout', 'mismatch', 'peer-lost', 'user', 'error'];
    if (
      typeof r !== 'object' ||
      r === null ||
      !kinds.includes(r.kind as string) ||
      !Number.isInteger(r.origin) ||
      typeof r.message !== 'string'
    ) {
      this.violation(peer, 'abort frame has no valid reason');
      return;
    }
    this.abort(r as AbortReason);
  }

  private violation(peer: TcpPeer, detail: string): void {
    peer.reader = { kind: 'stopped' };
    this.abort({
      kind: 'error',
      origin: this.rank,
      peer: peer.rank,
      message: `[tcp] rank ${this.rank}: malformed frame from rank ${peer.rank}: ${detail}`,
    });
    peer.recvSocket?.destroy();
  }

  private peerDied(peer: TcpPeer, how: string): void {
    if (this.phase === 'closing' || peer.state === 'closed' || peer.byeReceived) return;
    const wasOpen = peer.state === 'open' || peer.state === 'connecting';
    peer.state = 'dead';
    if (!wasOpen) return;
    this.abort({
      kind: 'peer-lost',
      origin: this.rank,
      peer: peer.rank,
      message: `rank ${peer.rank} is gone: ${how} (seen by rank ${this.rank} over tcp)`,
    });
  }

  /**
   * [Note: which rank died]
   * A peer's frames (data, abort, bye) come on the socket we read; the socket we send on closes
   * when the peer closes the one it reads. When the peer aborts because a third rank died, it sends
   * its abort frame (naming that rank) and closes both: the close of our send socket can be seen
   * before the abort frame is read from the other socket, and blaming the peer then would name the
   * wrong rank. So a closed send socket declares the peer dead only once its read socket has closed
   * too (which comes after every frame on it was parsed), or after a short grace.
   */
  private sendSocketClosed(peer: TcpPeer, hadError: boolean): void {
    const how = hadError ? 'its socket errored' : 'its socket closed';
    const recv = peer.recvSocket;
    if (recv === null || recv.destroyed) {
      this.peerDied(peer, how);
      return;
    }
    const timer = setTimeout(() => this.peerDied(peer, how), PEER_CLOSE_GRACE_MS);
    recv.once('close', () => clearTimeout(timer));
  }

  private onAborted(reason: AbortReason): void {
    this.inbox.abort(reason);
    const error = new TransportAbortedError(reason);
    for (const pending of this.pendingSends) pending.reject(error);
    this.pendingSends.clear();
    if (this.phase === 'closing') return;
    const frame = encodeFrame(
      { kind: FrameKind.abort, tag: 0, seq: 0, sender: this.rank },
      new TextEncoder().encode(JSON.stringify(reason)),
    );
    for (const peer of this.peers) {
      const socket = peer?.sendSocket;
      if (socket && !socket.destroyed && peer.state !== 'dead') socket.end(frame);
    }
  }

  private async shutdown(): Promise<void> {
    const bye = encodeFrame(
      { kind: FrameKind.bye, tag: 0, seq: 0, sender: this.rank },
      new Uint8Array(0),
    );
    const wasAborted = this.abortState.reason !== null;
    this.abortState.trigger({
      kind: 'user',
      origin: this.rank,
      message: `rank ${this.rank} closed its tcp transport`,
    });
    if (wasAborted) {
      // The abort frames (`onAborted`) may still sit in the sockets' buffers: destroying them now
      // would drop the frames and leave the peers to guess who failed.
      const deadline = Date.now() + ABORT_FLUSH_MS;
      while (
        Date.now() < deadline &&
        this.peers.some(
          (p) => p?.sendSocket != null && !p.sendSocket.destroyed && !p.sendSocket.writableFinished,
        )
      ) {
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    } else {
      for (const peer of this.peers) {
        const socket = peer?.sendSocket;
        if (socket && !socket.destroyed) socket.end(bye);
      }
      const deadline = Date.now() + BYE_WAIT_MS;
      while (
        Date.now() < deadline &&
        this.peers.some(
          (p) => p !== null && p.state === 'open' && !p.byeReceived && !p.recvSocket?.destroyed,
        )
      ) {
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    }
    this.unsubscribe();
    for (const peer of this.peers) {
      peer?.sendSocket?.destroy();
      peer?.recvSocket?.destroy();
    }
    this.guard.close();
    const server = this.server;
    if (server !== null) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
