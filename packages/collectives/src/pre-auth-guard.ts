import type { Server } from 'node:net';
import type { Socket } from 'node:net';
import {
  DEFAULT_HANDSHAKE_TIMEOUT_MS,
  DEFAULT_MAX_PENDING,
  DEFAULT_PRE_AUTH_BYTES,
  type PreAuthLimits,
  preAuthLimits,
} from './pre-auth-limits.js';

/**
 * [Note: strangers on a port]
 *
 * Every port a rank listens on (the rendezvous store, the `tcp` and the `ws`/`wss` data ports) is
 * open to anyone who can reach it, and a connection proves it belongs to the job only with its
 * hello (the join token). Until then it is a stranger, and a stranger costs bounded memory and
 * time, whatever it sends:
 *
 * - it may send at most `maxBytes` (8 KiB by default) before its hello checks out: a byte count on
 *   the socket destroys it past that, so no message parser ever buffers more (the `ws` package
 *   would otherwise accept a message of up to its `maxPayload`, gigabytes on a data port); HTTP
 *   upgrade headers are capped by the server's `maxHeaderSize` (the same 8 KiB), and a plain HTTP
 *   request gets 426 and is destroyed;
 * - it must have shown a valid hello `handshakeTimeoutMs` (10 s by default) after it connected, or
 *   it is destroyed: not closed gracefully, which would wait on a WebSocket close handshake the
 *   stranger never answers (the store used to hold such connections about 40 s); over TLS the
 *   server's `handshakeTimeout` is the same deadline for the TLS handshake;
 * - at most `maxPending` (64 by default) strangers are held at once; a connection past that is
 *   destroyed as soon as it is accepted, and the server's `maxConnections` (`maxPending` plus what
 *   the group itself needs) also bounds connections still in their TLS handshake.
 *
 * After the hello, the limits are the group's own: a data frame is at most `maxMessageBytes` (the
 * transport's option) and a control frame 64 KiB ([Note: network frames]); a store message at most
 * 4 MiB ([Note: the rendezvous protocol]). The rendezvous options pass `preAuth` to every port, and
 * tests shorten the deadline with it.
 */

export type { PreAuthLimits };
export { DEFAULT_HANDSHAKE_TIMEOUT_MS, DEFAULT_MAX_PENDING, DEFAULT_PRE_AUTH_BYTES, preAuthLimits };

/** Why a stranger was dropped. */
export type DropReason = 'too many pending' | 'handshake deadline' | 'too many bytes';

interface Pending {
  timer: ReturnType<typeof setTimeout>;
  /** When the handshake deadline passes (`Date.now()` time). */
  deadline: number;
  bytes: number;
  onData: ((chunk: Buffer) => void) | null;
}

/**
 * Holds every connection of one listening port until its hello checks out, enforcing the limits of
 * [Note: strangers on a port]. Node only.
 */
export class PreAuthGuard {
  readonly limits: Required<PreAuthLimits>;
  /** Connections dropped, by reason (a counter for tests and diagnostics). */
  readonly dropped: Record<DropReason, number> = {
    'too many pending': 0,
    'handshake deadline': 0,
    'too many bytes': 0,
  };
  private readonly pending = new Map<Socket, Pending>();

  constructor(limits: PreAuthLimits = {}) {
    this.limits = preAuthLimits(limits);
  }

  /** Unverified connections held now. */
  get pendingCount(): number {
    return this.pending.size;
  }

  /**
   * Bounds `server`'s connections: `authenticated` (what the group itself keeps open) plus
   * `maxPending`, which also covers connections still in a TLS handshake.
   */
  capServer(server: Server, authenticated: number): void {
    server.maxConnections = authenticated + this.limits.maxPending;
  }

  /**
   * A connection was accepted: start its deadline, or destroy it when `maxPending` are already
   * held. With `countBytes`, bytes read from it count against `maxBytes` (leave it off where a
   * parser that reads natively owns the socket, an HTTP server before the upgrade, and call
   * `countBytes` once the socket is handed over). Returns whether it was admitted.
   */
  admit(socket: Socket, options: { countBytes?: boolean } = {}): boolean {
    if (this.pending.has(socket)) return true;
    if (this.pending.size >= this.limits.maxPending) {
      this.drop(socket, 'too many pending');
      return false;
    }
    this.hold(socket, Date.now() + this.limits.handshakeTimeoutMs, 0);
    if (options.countBytes !== false) this.countBytes(socket);
    return true;
  }

  /**
   * `to` took over `from`'s connection (a socket made on the same handle, which reads with
   * `onread` and so emits no 'data'): it is held in `from`'s place, with the bytes read so far
   * and the same deadline; its reader reports what it reads with `addBytes`.
   */
  transfer(from: Socket, to: Socket): void {
    const entry = this.pending.get(from);
    if (entry === undefined) return;
    this.release(from);
    this.hold(to, entry.deadline, entry.bytes);
  }

  /** `n` more bytes were read from the pending `socket` (sockets that emit no 'data'). */
  addBytes(socket: Socket, n: number): void {
    const entry = this.pending.get(socket);
    if (entry === undefined) return;
    entry.bytes += n;
    if (entry.bytes > this.limits.maxBytes) this.drop(socket, 'too many bytes');
  }

  /** From now on, bytes read from this pending socket count against `maxBytes`. */
  countBytes(socket: Socket, alreadyRead = 0): void {
    const entry = this.pending.get(socket);
    if (entry === undefined || entry.onData !== null) return;
    entry.bytes += alreadyRead;
    entry.onData = (chunk) => {
      entry.bytes += chunk.byteLength;
      if (entry.bytes > this.limits.maxBytes) this.drop(socket, 'too many bytes');
    };
    socket.on('data', entry.onData);
    if (entry.bytes > this.limits.maxBytes) this.drop(socket, 'too many bytes');
  }

  /** Whether `socket` is held here, not yet verified. */
  isPending(socket: Socket): boolean {
    return this.pending.has(socket);
  }

  /** The hello checked out: the socket is the group's, no longer limited here. */
  authenticated(socket: Socket): void {
    this.release(socket);
  }

  /** Destroys every connection still pending (the port is closing). */
  close(): void {
    for (const socket of [...this.pending.keys()]) {
      this.release(socket);
      socket.destroy();
    }
  }

  private drop(socket: Socket, reason: DropReason): void {
    this.dropped[reason]++;
    this.release(socket);
    socket.destroy();
  }

  private hold(socket: Socket, deadline: number, bytes: number): void {
    const timer = setTimeout(
      () => this.drop(socket, 'handshake deadline'),
      Math.max(0, deadline - Date.now()),
    );
    this.pending.set(socket, { timer, deadline, bytes, onData: null });
    socket.once('close', () => this.release(socket));
  }

  private release(socket: Socket): void {
    const entry = this.pending.get(socket);
    if (entry === undefined) return;
    clearTimeout(entry.timer);
    if (entry.onData !== null) socket.off('data', entry.onData);
    this.pending.delete(socket);
  }
}
