import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import type { Socket } from 'node:net';
import { WebSocketServer } from 'ws';
import type { ElasticCoordinatorOptions } from './coordinator-options.js';
import { MAX_ELASTIC_MESSAGE_BYTES } from './protocol.js';

/** The https server under a coordinator that serves `wss://`; `close` stops it. */
export interface SecureServer {
  close(): Promise<void>;
}

/*
 * [Note: an elastic world over TLS]
 * With `tls` (a PEM certificate and key), the coordinator listens on an https server and takes
 * WebSocket upgrades there, so members join at `wss://host:port`; every epoch's rendezvous store
 * is served over `wss://` with the same certificate (./epoch-stores.ts), so the store URLs the
 * coordinator hands out are `wss://` too. The join token travels in the members' first message
 * on those sockets, so it never crosses the network outside TLS. A client that speaks plain http
 * or ws to the port fails the TLS handshake and its socket is destroyed: nothing is answered in
 * the clear, not even a redirect. A Node member trusts a private CA with `joinElastic`'s
 * `tls.ca`; a browser tab uses its own trust store. The data links are the members' own: over
 * `ws` with `tls`, a member that listens serves `wss://` with its `tls.cert` and `tls.key`, and a
 * member that listens on nothing (`listen: false`) needs neither ([Note: ws over TLS]); the tcp
 * transport has no TLS and is refused with `tls`.
 */

/** Listens as `options` say: a plain WebSocket server, or one on an https server with `tls`. */
export async function listenCoordinator(
  options: ElasticCoordinatorOptions,
): Promise<{ server: WebSocketServer; secure: SecureServer | null }> {
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? 0;
  if (options.tls === undefined) {
    const server = new WebSocketServer({ host, port, maxPayload: MAX_ELASTIC_MESSAGE_BYTES });
    await new Promise<void>((resolve, reject) => {
      server.once('listening', resolve);
      server.once('error', reject);
    });
    server.on('error', () => {});
    return { server, secure: null };
  }
  const https: HttpsServer = createHttpsServer({
    // Node's TLS takes any ArrayBufferView; its types name Buffer.
    cert: options.tls.cert as string | Buffer,
    key: options.tls.key as string | Buffer,
  });
  // A failed handshake (plain http, an untrusted certificate) only drops that connection.
  https.on('tlsClientError', (_error, socket: Socket) => socket.destroy());
  // Anything but a WebSocket upgrade (a browser opening the URL) is answered 426 over TLS.
  https.on('request', (_request, response) => response.writeHead(426).end());
  const server = new WebSocketServer({ server: https, maxPayload: MAX_ELASTIC_MESSAGE_BYTES });
  server.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    https.once('error', reject);
    https.listen(port, host, () => resolve());
  });
  https.on('error', () => {});
  return {
    server,
    secure: {
      close: () =>
        new Promise<void>((resolve) => {
          https.close(() => resolve());
          https.closeAllConnections();
        }),
    },
  };
}
