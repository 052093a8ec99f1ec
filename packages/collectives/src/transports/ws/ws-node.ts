import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { ArgumentError } from '@webshard/tensor-core';
import { PreAuthGuard } from '../../pre-auth-guard.js';
import type { ChannelFactory, Listener, WsTlsOptions } from './channel.js';
import { WebSocketChannel } from './websocket-channel.js';
import { takeOverSocket } from './take-over-socket.js';
import { acceptKey, dialWebSocket } from './websocket-dial.js';

/** The largest message a channel takes whole (before it streams: the hello and its answer). */
const MAX_WHOLE_MESSAGE = 2 ** 31 - 1;
/** An accepted socket's first read, before its channel exists (the hello fits). */
const HANDSHAKE_READ_BYTES = 4 << 10;

/** Whether an upgrade request is a WebSocket version 13 handshake with a well-formed key. */
function validUpgrade(request: import('node:http').IncomingMessage): string | null {
  const key = request.headers['sec-websocket-key'];
  if (
    request.method !== 'GET' ||
    request.headers.upgrade?.toLowerCase() !== 'websocket' ||
    request.headers['sec-websocket-version'] !== '13' ||
    typeof key !== 'string' ||
    !/^[+/0-9A-Za-z]{22}==$/.test(key)
  ) {
    return null;
  }
  return key;
}

/**
 * Node channels: the upgrade handshake over `node:http(s)` and our own WebSocket framing after it
 * (`WebSocketChannel`; zero masks, no extension so no compression, TCP_NODELAY). With `tls`, this
 * rank listens on `wss://` with `tls.cert` and `tls.key`, dials only `wss://` URLs and trusts
 * `tls.ca` (else Node's default CAs); see [Note: ws over TLS].
 */
export function nodeChannels(tls?: WsTlsOptions): ChannelFactory {
  return {
    dial(url) {
      if (tls !== undefined && !url.startsWith('wss://')) {
        return Promise.reject(
          new ArgumentError(
            'ws',
            `this rank requires TLS but its peer listens on ${url}: give every rank the same tls options`,
          ),
        );
      }
      return dialWebSocket(url, {
        maxMessageBytes: MAX_WHOLE_MESSAGE,
        ...(tls?.ca === undefined ? {} : { ca: tls.ca as string | Buffer }),
      });
    },
    async listen(host, maxMessageBytes, accept, options = {}): Promise<Listener> {
      const maxPayload = Math.min(maxMessageBytes + 64, 2 ** 31 - 1);
      if (tls !== undefined && (tls.cert === undefined || tls.key === undefined)) {
        throw new ArgumentError(
          'ws',
          'tls needs cert and key on every rank that accepts connections (or listen: false)',
        );
      }
      // See [Note: strangers on a port]: deadline, byte count and number of strangers.
      const guard = new PreAuthGuard(options.preAuth);
      const limits = { maxHeaderSize: guard.limits.maxBytes };
      const http: HttpServer =
        tls === undefined
          ? createHttpServer(limits)
          : createHttpsServer({
              ...limits,
              // Any ArrayBufferView works in Node's TLS; its types name Buffer.
              cert: tls.cert as string | Buffer,
              key: tls.key as string | Buffer,
              handshakeTimeout: guard.limits.handshakeTimeoutMs,
            });
      guard.capServer(http, options.expectedConnections ?? 0);
      http.on(tls === undefined ? 'connection' : 'secureConnection', (socket: Socket) =>
        guard.admit(socket, { countBytes: false }),
      );
      // A failed TLS handshake (wrong CA, plain ws://) only drops that connection.
      if (tls !== undefined) http.on('tlsClientError', (_error, socket) => socket.destroy());
      http.on('request', (_request, response) => {
        response.writeHead(426, { connection: 'close' }).end();
        response.socket?.destroy();
      });
      const open = new Set<WebSocketChannel>();
      http.on('upgrade', (request, raw: Socket, head: Buffer) => {
        guard.countBytes(raw, head.byteLength);
        if (raw.destroyed) return;
        const key = validUpgrade(request);
        if (key === null) {
          raw.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
          raw.destroySoon();
          return;
        }
        raw.setNoDelay(true);
        raw.setTimeout(0);
        // See [Note: reading an accepted socket in place]; TLS sockets keep 'data' events.
        let channel: WebSocketChannel | null = null;
        // The socket asks for its first buffer as it is made, before the channel exists.
        const first = Buffer.allocUnsafe(HANDSHAKE_READ_BYTES);
        const taken = takeOverSocket(raw, {
          buffer: () => channel?.readBuffer() ?? first,
          callback: (nread, buffer) => {
            if (nread > 0) channel?.afterRead(buffer, nread);
            return true;
          },
        });
        const socket = taken ?? raw;
        if (taken !== null) guard.transfer(raw, taken);
        socket.write(
          'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
            `Sec-WebSocket-Accept: ${acceptKey(key)}\r\n\r\n`,
        );
        const opened = new WebSocketChannel(
          socket,
          false,
          maxPayload,
          () => guard.authenticated(socket),
          (n) => guard.addBytes(socket, n),
        );
        channel = opened;
        open.add(opened);
        socket.once('close', () => open.delete(opened));
        accept(opened);
        if (head.byteLength > 0) opened.push(head);
        if (taken === null) raw.on('data', (chunk: Buffer) => opened.push(chunk));
      });
      await new Promise<void>((resolve, reject) => {
        http.once('error', reject);
        http.listen(0, host, () => {
          http.off('error', reject);
          resolve();
        });
      });
      http.on('error', () => {});
      const { port } = http.address() as AddressInfo;
      const urlHost = host.includes(':') ? `[${host}]` : host;
      return {
        url: `${tls === undefined ? 'ws' : 'wss'}://${urlHost}:${port}`,
        close: async () => {
          guard.close();
          for (const channel of open) channel.destroy();
          http.closeAllConnections();
          await new Promise<void>((resolve) => http.close(() => resolve()));
        },
      };
    },
    tokenMatches(given, expected) {
      const a = createHash('sha256').update(given).digest();
      const b = createHash('sha256').update(expected, 'utf8').digest();
      return timingSafeEqual(a, b);
    },
  };
}
