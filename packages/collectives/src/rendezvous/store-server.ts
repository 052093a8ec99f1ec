import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { ArgumentError } from '@webshard/tensor-core';
import { type WebSocket, WebSocketServer } from 'ws';
import { type PreAuthLimits, PreAuthGuard } from '../pre-auth-guard.js';
import {
  CLOSE_PROTOCOL,
  CLOSE_REFUSED,
  MAX_MESSAGE_BYTES,
  parseRequest,
  type StoreRequest,
  type StoreResponse,
} from './protocol.js';
import {
  resolveStoreLimits,
  STORE_LIMIT_CODE,
  type StoreLimits,
  StoreQuota,
} from './store-limits.js';

/** TLS material for `wss://`: PEM strings or bytes. */
export interface TlsOptions {
  cert: string | Uint8Array;
  key: string | Uint8Array;
}

/** Options of the rendezvous store server that rank 0 hosts. */
export interface StoreServerOptions {
  /** Port to listen on; 0 picks a free one (read it back from `listen()`). */
  port: number;
  /** Address to bind; `127.0.0.1` unless told otherwise. */
  host?: string;
  /** The join token every client must present. Required when `host` is not a loopback address. */
  token?: string;
  /** Number of ranks allowed to join; hello messages with another world size are refused. */
  worldSize: number;
  /** Serve `wss://` with this certificate and key. */
  tls?: TlsOptions;
  /**
   * A client that does not send a valid hello within this time is destroyed (default 10 s); the
   * same as `preAuth.handshakeTimeoutMs`, which wins when both are given.
   */
  helloTimeoutMs?: number;
  /** Limits on connections before their hello checks out (see [Note: strangers on a port]). */
  preAuth?: PreAuthLimits;
  /** Limits on what one client may make the store hold ([Note: the store's limits]). */
  limits?: StoreLimits;
}

type ConnectionState =
  | { kind: 'awaitingHello' }
  | { kind: 'joined'; rank: number }
  | { kind: 'closed' };

interface Waiter {
  keys: string[];
  finish: (missing: string[] | undefined) => void;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

function digest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

/**
 * The rendezvous key-value store, hosted by rank 0 over WebSocket (`ws://` or `wss://`).
 * Node only. See [Note: the rendezvous protocol] for the wire format.
 */
export class StoreServer {
  private readonly options: StoreServerOptions;
  private readonly tokenDigest: Buffer;
  private readonly data = new Map<string, string>();
  private readonly waiters = new Set<Waiter>();
  private readonly joined = new Map<number, WebSocket>();
  private http: HttpServer | undefined;
  private wss: WebSocketServer | undefined;
  /** Holds connections until their hello checks out (see [Note: strangers on a port]). */
  readonly guard: PreAuthGuard;
  /** What each client holds in the store, against its limits. */
  readonly quota: StoreQuota;

  constructor(options: StoreServerOptions) {
    const host = options.host ?? '127.0.0.1';
    if (!LOOPBACK.has(host) && !options.token) {
      throw new ArgumentError(
        'rendezvous',
        `binding to ${host} needs a join token (option token or WEBSHARD_TOKEN)`,
      );
    }
    if (!Number.isSafeInteger(options.worldSize) || options.worldSize < 1) {
      throw new ArgumentError(
        'rendezvous',
        `worldSize must be a positive integer, got ${options.worldSize}`,
      );
    }
    this.options = { ...options, host };
    this.tokenDigest = digest(options.token ?? '');
    this.quota = new StoreQuota(resolveStoreLimits(options.limits));
    this.guard = new PreAuthGuard({
      ...(options.helloTimeoutMs !== undefined
        ? { handshakeTimeoutMs: options.helloTimeoutMs }
        : {}),
      ...options.preAuth,
    });
  }

  /** Starts listening; resolves with the bound port. */
  async listen(): Promise<number> {
    const { guard } = this;
    const limits = { maxHeaderSize: guard.limits.maxBytes };
    const http = this.options.tls
      ? createHttpsServer({
          ...limits,
          // Node's TLS takes any ArrayBufferView; its types name Buffer, so the public types
          // (which must not need @types/node) say Uint8Array.
          cert: this.options.tls.cert as string | Buffer,
          key: this.options.tls.key as string | Buffer,
          handshakeTimeout: guard.limits.handshakeTimeoutMs,
        })
      : createHttpServer(limits);
    this.http = http;
    guard.capServer(http, this.options.worldSize + 1);
    // The HTTP parser reads the socket natively until the upgrade: bytes count from then on, the
    // headers before are capped by maxHeaderSize.
    http.on(this.options.tls ? 'secureConnection' : 'connection', (socket: Socket) =>
      guard.admit(socket, { countBytes: false }),
    );
    if (this.options.tls) http.on('tlsClientError', (_error, socket) => socket.destroy());
    http.on('request', (_request, response) => {
      response.writeHead(426, { connection: 'close' }).end();
      response.socket?.destroy();
    });
    const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE_BYTES });
    this.wss = wss;
    http.on('upgrade', (request, raw: Socket, head: Buffer) => {
      // From the upgrade on, bytes count (`head` is what the parser read past the headers).
      guard.countBytes(raw, head.byteLength);
      if (raw.destroyed) return;
      wss.handleUpgrade(request, raw, head, (socket) => this.accept(socket, raw));
    });
    wss.on('error', () => {});
    await new Promise<void>((resolve, reject) => {
      http.once('error', reject);
      http.listen(this.options.port, this.options.host, () => {
        http.off('error', reject);
        resolve();
      });
    });
    http.on('error', () => {});
    return (http.address() as AddressInfo).port;
  }

  /** Ranks whose connection is open now. */
  joinedRanks(): number[] {
    return [...this.joined.keys()].sort((a, b) => a - b);
  }

  /** Closes every connection and stops listening. Pending waits fail on the clients. */
  async close(): Promise<void> {
    for (const waiter of this.waiters) waiter.finish(waiter.keys);
    this.waiters.clear();
    this.guard.close();
    for (const client of this.wss?.clients ?? []) client.terminate();
    await new Promise<void>((resolve) => (this.wss ? this.wss.close(() => resolve()) : resolve()));
    await new Promise<void>((resolve) =>
      this.http ? this.http.close(() => resolve()) : resolve(),
    );
    this.http?.closeAllConnections?.();
  }

  private accept(socket: WebSocket, raw: Socket): void {
    let state: ConnectionState = { kind: 'awaitingHello' };
    const send = (message: StoreResponse): void => {
      if (socket.readyState === socket.OPEN) socket.send(JSON.stringify(message));
    };
    socket.on('error', () => {});
    socket.on('close', () => {
      if (state.kind === 'joined' && this.joined.get(state.rank) === socket) {
        this.joined.delete(state.rank);
        const lost: StoreResponse = { event: 'rankLost', rank: state.rank };
        for (const other of this.joined.values()) other.send(JSON.stringify(lost));
      }
      state = { kind: 'closed' };
    });
    socket.on('message', (data, isBinary) => {
      if (state.kind === 'closed') return;
      const request = isBinary ? 'binary message' : parseRequest(data.toString());
      if (typeof request === 'string') {
        const id = state.kind === 'joined' ? -1 : 0;
        send({ id, ok: false, error: { code: 'E_PROTOCOL', message: request } });
        socket.close(state.kind === 'joined' ? CLOSE_PROTOCOL : CLOSE_REFUSED, request);
        return;
      }
      if (state.kind === 'awaitingHello') {
        const refusal = this.checkHello(request);
        if (refusal !== undefined) {
          send({ id: request.id, ok: false, error: { code: 'E_AUTH', message: refusal } });
          state = { kind: 'closed' };
          // The answer goes out first; the guard's deadline destroys the socket if the close
          // handshake is never answered.
          socket.close(CLOSE_REFUSED, 'refused');
          return;
        }
        this.guard.authenticated(raw);
        const rank = (request as { rank: number }).rank;
        state = { kind: 'joined', rank };
        this.joined.set(rank, socket);
        send({ id: request.id, ok: true, value: null });
        return;
      }
      if (request.op === 'bye') {
        this.joined.delete(state.rank);
        state = { kind: 'closed' };
        send({ id: request.id, ok: true, value: null });
        socket.close(1000, 'bye');
        return;
      }
      this.handle(request, send, state.rank);
    });
  }

  private checkHello(request: StoreRequest): string | undefined {
    if (request.op !== 'hello') return 'the first message must be hello';
    const given = digest(request.token);
    if (!timingSafeEqual(given, this.tokenDigest)) {
      return request.token === ''
        ? 'no join token given, and this store requires one (token option or WEBSHARD_TOKEN)'
        : 'wrong token';
    }
    if (request.worldSize !== this.options.worldSize) {
      return `world size ${request.worldSize} does not match the store's ${this.options.worldSize}`;
    }
    if (request.rank < 0 || request.rank >= this.options.worldSize) {
      return `rank ${request.rank} is outside [0, ${this.options.worldSize})`;
    }
    if (this.joined.has(request.rank)) return `rank ${request.rank} has already joined`;
    return undefined;
  }

  /**
   * Sets `key` for `rank` unless a limit refuses it ([Note: the store's limits]); a refusal is
   * answered here and nothing changes.
   */
  private write(
    rank: number,
    id: number,
    key: string,
    value: string,
    send: (message: StoreResponse) => void,
  ): boolean {
    const refusal = this.quota.refusal(rank, key, value);
    if (refusal !== null) {
      send({ id, ok: false, error: { code: STORE_LIMIT_CODE, message: refusal } });
      return false;
    }
    this.quota.wrote(rank, key, value);
    this.data.set(key, value);
    this.wake();
    return true;
  }

  private handle(
    request: StoreRequest,
    send: (message: StoreResponse) => void,
    rank: number,
  ): void {
    const { id } = request;
    switch (request.op) {
      case 'set':
        if (this.write(rank, id, request.key, request.value, send)) {
          send({ id, ok: true, value: null });
        }
        return;
      case 'add': {
        const current = Number(this.data.get(request.key) ?? '0');
        const next = (Number.isFinite(current) ? current : 0) + request.delta;
        if (this.write(rank, id, request.key, String(next), send)) {
          send({ id, ok: true, value: next });
        }
        return;
      }
      case 'compareSet': {
        const current = this.data.get(request.key);
        if ((current === undefined && request.expected === '') || current === request.expected) {
          if (this.write(rank, id, request.key, request.desired, send)) {
            send({ id, ok: true, value: request.desired });
          }
        } else {
          send({ id, ok: true, value: current ?? null });
        }
        return;
      }
      case 'delete':
        this.quota.deleted(request.key);
        send({ id, ok: true, value: this.data.delete(request.key) });
        return;
      case 'check':
        send({ id, ok: true, value: request.keys.every((key) => this.data.has(key)) });
        return;
      case 'get':
      case 'wait': {
        const keys = request.op === 'get' ? [request.key] : request.keys;
        this.await(keys, request.timeoutMs, (missing) => {
          if (missing === undefined) {
            const value = request.op === 'get' ? (this.data.get(request.key) ?? null) : null;
            send({ id, ok: true, value });
          } else {
            send({
              id,
              ok: false,
              error: { code: 'E_TIMEOUT', message: 'timed out', missingKeys: missing },
            });
          }
        });
        return;
      }
      case 'hello':
        send({ id, ok: false, error: { code: 'E_PROTOCOL', message: 'already joined' } });
        return;
      case 'bye':
        return;
    }
  }

  private await(keys: string[], timeoutMs: number, done: (missing?: string[]) => void): void {
    if (keys.every((key) => this.data.has(key))) {
      done(undefined);
      return;
    }
    const timer = setTimeout(() => {
      this.waiters.delete(waiter);
      done(keys.filter((key) => !this.data.has(key)));
    }, timeoutMs);
    const waiter: Waiter = {
      keys,
      finish: (missing) => {
        clearTimeout(timer);
        done(missing);
      },
    };
    this.waiters.add(waiter);
  }

  private wake(): void {
    for (const waiter of this.waiters) {
      if (waiter.keys.every((key) => this.data.has(key))) {
        this.waiters.delete(waiter);
        waiter.finish(undefined);
      }
    }
  }
}
