import { createHash, timingSafeEqual } from 'node:crypto';
import { connect, createServer, type Server, type Socket } from 'node:net';
import type { AbortReason } from '../../errors.js';
import { type PreAuthLimits, PreAuthGuard } from '../../pre-auth-guard.js';
import { publishedBy } from '../../rendezvous/published-by.js';
import type { StoreClient } from '../../rendezvous/store-client.js';
import type { FrameHandler } from '../framed/frame-reader.js';
import { FramedPeer, FramedTransport } from '../framed/framed-transport.js';
import { helloFrame, parseHello } from '../framed/hello.js';
import {
  type FrameHeader,
  FrameKind,
  HEADER_BYTES,
  readHeader,
  writeHeader,
} from '../framed/frame.js';

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
  /**
   * Most payload held per peer that no receive has claimed, in bytes (default
   * `WEBSHARD_MAX_UNEXPECTED_BYTES`, else 256 MiB; [Note: the unexpected-message budget]).
   */
  maxUnexpectedBytes?: number;
  /** Store key prefix, to run several transports on one store (default `tcp`). */
  prefix?: string;
  /** Deadline for connecting to every peer (default: the store's timeout). */
  timeoutMs?: number;
  /** Limits on connections before their hello checks out (see [Note: strangers on a port]). */
  preAuth?: PreAuthLimits;
}

/** Small on purpose: payload bytes that land in scratch are copied; the rest is read in place. */
const SCRATCH_BYTES = 32 << 10;
/** Below this many remaining payload bytes a read goes to scratch and is copied (cheaper). */
const DIRECT_READ_MIN = 16 << 10;
/** How long an aborted transport lets its abort frames drain before closing (see `shutdown`). */
const ABORT_FLUSH_MS = 500;
/** How long a closed send socket waits for the same peer's frames on the other socket. */
const PEER_CLOSE_GRACE_MS = 250;

function digest(bytes: Uint8Array | string): Buffer {
  return createHash('sha256').update(bytes).digest();
}

/** One remote rank: a socket we send on (it connected to us) and one we read (we connected). */
class TcpPeer extends FramedPeer {
  sendSocket: Socket | null = null;
  recvSocket: Socket | null = null;
  readonly scratch = Buffer.allocUnsafe(SCRATCH_BYTES);
}

/**
 * The `tcp` transport: raw `node:net` sockets between Node processes, one per direction per pair
 * of ranks, addresses exchanged through the rendezvous store. Node only. The frames and their rules
 * are those of every framed transport ([Note: framed transports]).
 *
 * [Note: the tcp data path]
 * Rank A reads from B on the socket A opened to B (and sends to B on the one B opened to A), so
 * every socket we read is one we created, with `onread`: Node reads into a buffer we choose. That
 * buffer is the posted receive's destination while a payload is in flight (the kernel copies
 * straight into it), or a per-peer 32 KiB scratch buffer for headers and small tails. Messages
 * that arrive before their receive go into pooled buffers (`Mailbox`). Sends write the 36-byte
 * header (from a per-peer free list) and the caller's view, corked together, with TCP_NODELAY:
 * nothing is copied or allocated per message in steady state. See [Note: network frames] for the
 * header and its validation.
 */
export class TcpTransport extends FramedTransport<TcpPeer> {
  readonly kind = 'tcp';
  private readonly tokenDigest: Buffer;
  private server: Server | null = null;
  /** Holds accepted connections until their hello checks out. */
  readonly guard: PreAuthGuard;

  private constructor(private readonly options: TcpTransportOptions) {
    super(
      options.store,
      options.maxMessageBytes,
      (rank: number, handler: FrameHandler) => new TcpPeer(rank, handler),
      options.maxUnexpectedBytes,
    );
    this.tokenDigest = digest(options.token);
    this.guard = new PreAuthGuard(options.preAuth);
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

  protected transmit(target: TcpPeer, frame: FrameHeader, data: Uint8Array): Promise<void> {
    const socket = target.sendSocket!;
    const header = target.freeHeaders.pop() ?? Buffer.allocUnsafe(HEADER_BYTES);
    writeHeader(header, frame);
    return this.trackSend((done) => {
      const written = (error?: Error | null) => {
        target.freeHeaders.push(header);
        done(error);
      };
      socket.cork();
      if (data.byteLength === 0) {
        socket.write(header, written);
      } else {
        socket.write(header);
        socket.write(data, written);
      }
      socket.uncork();
    });
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
    this.watchStore(store);
    await Promise.all(
      this.peers.map(async (peer) => {
        if (peer === null) return;
        const key = `${prefix}/addr/${peer.rank}`;
        const text = await publishedBy(store, key, peer.rank, timeoutMs, 'tcp');
        const { host: peerHost, port: peerPort } = JSON.parse(text) as {
          host: string;
          port: number;
        };
        this.dial(peer, peerHost, peerPort);
      }),
    );
    await this.waitForPeers(timeoutMs);
  }

  /** Opens the socket we read `peer`'s messages from, and says hello on it. */
  private dial(peer: TcpPeer, host: string, port: number): void {
    let direct = false;
    const socket = connect({
      host,
      port,
      noDelay: true,
      onread: {
        // Where Node reads `peer`'s next bytes: straight into the payload target, or scratch.
        buffer: () => {
          const target = peer.reader.directTarget(DIRECT_READ_MIN);
          direct = target !== null;
          return target ?? peer.scratch;
        },
        callback: (nread: number, buffer: Uint8Array) => {
          if (nread <= 0) return true;
          if (direct && buffer !== peer.scratch) peer.reader.advanceDirect(nread);
          else peer.reader.write(buffer.subarray(0, nread));
          return true;
        },
      },
    });
    peer.recvSocket = socket;
    socket.setKeepAlive(true, 5000);
    socket.on('error', () => {});
    socket.on('connect', () => {
      socket.write(helloFrame(this.rank, this.size, this.options.token));
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
      if (buffered.byteLength > this.guard.limits.maxBytes) return reject();
      if (buffered.byteLength < HEADER_BYTES) return;
      const header = readHeader(buffered, 0);
      if (typeof header === 'string' || header.kind !== FrameKind.hello) return reject();
      if (buffered.byteLength < HEADER_BYTES + header.length) return;
      const hello = parseHello(buffered, this.size);
      const candidate = hello === undefined ? undefined : this.peers[hello.rank];
      if (
        hello === undefined ||
        !timingSafeEqual(digest(hello.token), this.tokenDigest) ||
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

  protected dropPeer(peer: TcpPeer): void {
    peer.recvSocket?.destroy();
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

  protected sendAbort(_reason: AbortReason, frame: Uint8Array): void {
    for (const peer of this.peers) {
      const socket = peer?.sendSocket;
      if (socket && !socket.destroyed && peer.state !== 'dead') socket.end(frame);
    }
  }

  protected async flushAbort(): Promise<void> {
    const deadline = Date.now() + ABORT_FLUSH_MS;
    const unsent = (peer: TcpPeer | null) =>
      peer?.sendSocket != null && !peer.sendSocket.destroyed && !peer.sendSocket.writableFinished;
    while (Date.now() < deadline && this.peers.some(unsent)) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  protected sendBye(frame: Uint8Array): void {
    for (const peer of this.peers) {
      const socket = peer?.sendSocket;
      if (socket && !socket.destroyed) socket.end(frame);
    }
  }

  protected override awaitsBye(peer: TcpPeer): boolean {
    return super.awaitsBye(peer) && !peer.recvSocket?.destroyed;
  }

  protected async teardown(): Promise<void> {
    for (const peer of this.peers) {
      peer?.sendSocket?.destroy();
      peer?.recvSocket?.destroy();
    }
    this.guard.close();
    const server = this.server;
    if (server !== null) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
