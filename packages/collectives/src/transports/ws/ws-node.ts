import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { ArgumentError } from '@webshard/tensor-core';
import { WebSocket, WebSocketServer } from 'ws';
import type { Channel, ChannelFactory, Listener, WsTlsOptions } from './channel.js';

/** The `ws` client masks with zeros: it then skips the XOR pass and the copy it needs. */
function zeroMask(mask: Uint8Array): void {
  mask.fill(0);
}

function wrap(socket: WebSocket): Channel {
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
          ...(tls?.ca === undefined ? {} : { ca: tls.ca }),
        });
        socket.binaryType = 'nodebuffer';
        socket.once('open', () => resolve(wrap(socket)));
        socket.once('error', (error) => reject(error));
      });
    },
    async listen(host, maxMessageBytes, accept): Promise<Listener> {
      const maxPayload = Math.min(maxMessageBytes + 64, 2 ** 31 - 1);
      if (tls !== undefined && (tls.cert === undefined || tls.key === undefined)) {
        throw new ArgumentError(
          'ws',
          'tls needs cert and key on every rank that accepts connections (or listen: false)',
        );
      }
      const https =
        tls === undefined ? undefined : createHttpsServer({ cert: tls.cert, key: tls.key });
      const server =
        https === undefined
          ? new WebSocketServer({ host, port: 0, perMessageDeflate: false, maxPayload })
          : new WebSocketServer({ server: https, perMessageDeflate: false, maxPayload });
      server.on('error', () => {});
      server.on('connection', (socket) => {
        socket.binaryType = 'nodebuffer';
        accept(wrap(socket));
      });
      if (https === undefined) {
        await new Promise<void>((resolve, reject) => {
          server.once('listening', resolve);
          server.once('error', reject);
        });
      } else {
        // A failed TLS handshake (wrong CA, plain ws://) only drops that connection.
        https.on('tlsClientError', (_error, socket) => socket.destroy());
        await new Promise<void>((resolve, reject) => {
          https.once('error', reject);
          https.listen(0, host, () => {
            https.off('error', reject);
            resolve();
          });
        });
        https.on('error', () => {});
      }
      const { port } = (https ?? server).address() as AddressInfo;
      const urlHost = host.includes(':') ? `[${host}]` : host;
      return {
        url: `${https === undefined ? 'ws' : 'wss'}://${urlHost}:${port}`,
        close: async () => {
          for (const client of server.clients) client.terminate();
          await new Promise<void>((resolve) => server.close(() => resolve()));
          if (https !== undefined) {
            https.closeAllConnections();
            await new Promise<void>((resolve) => https.close(() => resolve()));
          }
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
