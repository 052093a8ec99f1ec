import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { ArgumentError } from '@webshard/tensor-core';
import { WebSocket, WebSocketServer } from 'ws';
import { PreAuthGuard } from '../../pre-auth-guard.js';
import type { Channel, ChannelFactory, Listener, WsTlsOptions } from './channel.js';

/** The `ws` client masks with zeros: it then skips the XOR pass and the copy it needs. */
function zeroMask(mask: Uint8Array): void {
  mask.fill(0);
}

function wrap(socket: WebSocket, authenticated?: () => void): Channel {
  const channel: Channel = {
    send(bytes, done) {
      socket.send(
        bytes,
        { binary: true },
        done === undefined ? undefined : (error) => done(error ?? undefined),
      );
    },
    close: () => socket.close(1000, 'bye'),
    destroy: () => socket.terminate(),
    onMessage: () => {},
    onClose: () => {},
    ...(authenticated === undefined ? {} : { authenticated }),
  };
  socket.on('message', (data: Buffer, isBinary: boolean) => {
    channel.onMessage(isBinary ? data : data.toString());
  });
  socket.on('error', () => {});
  socket.on('close', (code) => channel.onClose(`its WebSocket closed (${code})`));
  return channel;
}

/**
 * Channels over the `ws` package: zero masks, no compression, TCP_NODELAY (ws's default). With
 * `tls`, this rank listens on `wss://` with `tls.cert` and `tls.key`, dials only `wss://` URLs and
 * trusts `tls.ca` (else Node's default CAs); see [Note: ws over TLS].
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
      return new Promise((resolve, reject) => {
        const socket = new WebSocket(url, {
          perMessageDeflate: false,
          generateMask: zeroMask,
          maxPayload: 2 ** 31 - 1,
          ...(tls?.ca === undefined ? {} : { ca: tls.ca as string | Buffer }),
        });
        socket.binaryType = 'nodebuffer';
        socket.once('open', () => resolve(wrap(socket)));
        socket.once('error', (error) => reject(error));
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
      const server = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload });
      server.on('error', () => {});
      http.on('upgrade', (request, raw: Socket, head: Buffer) => {
        guard.countBytes(raw, head.byteLength);
        if (raw.destroyed) return;
        server.handleUpgrade(request, raw, head, (socket) => {
          socket.binaryType = 'nodebuffer';
          accept(wrap(socket, () => guard.authenticated(raw)));
        });
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
          for (const client of server.clients) client.terminate();
          await new Promise<void>((resolve) => server.close(() => resolve()));
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
