import { createHash, timingSafeEqual } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { WebSocket, WebSocketServer } from 'ws';
import type { Channel, ChannelFactory, Listener } from './channel.js';

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

/** Channels over the `ws` package: zero masks, no compression, TCP_NODELAY (ws's default). */
export function nodeChannels(): ChannelFactory {
  return {
    dial(url) {
      return new Promise((resolve, reject) => {
        const socket = new WebSocket(url, {
          perMessageDeflate: false,
          generateMask: zeroMask,
          maxPayload: 2 ** 31 - 1,
        });
        socket.binaryType = 'nodebuffer';
        socket.once('open', () => resolve(wrap(socket)));
        socket.once('error', (error) => reject(error));
      });
    },
    async listen(host, maxMessageBytes, accept): Promise<Listener> {
      const server = new WebSocketServer({
        host,
        port: 0,
        perMessageDeflate: false,
        maxPayload: Math.min(maxMessageBytes + 64, 2 ** 31 - 1),
      });
      server.on('error', () => {});
      server.on('connection', (socket) => {
        socket.binaryType = 'nodebuffer';
        accept(wrap(socket));
      });
      await new Promise<void>((resolve, reject) => {
        server.once('listening', resolve);
        server.once('error', reject);
      });
      const { port } = server.address() as AddressInfo;
      const urlHost = host.includes(':') ? `[${host}]` : host;
      return {
        url: `ws://${urlHost}:${port}`,
        close: () =>
          new Promise<void>((resolve) => {
            for (const client of server.clients) client.terminate();
            server.close(() => resolve());
          }),
      };
    },
    tokenMatches(given, expected) {
      const a = createHash('sha256').update(given).digest();
      const b = createHash('sha256').update(expected, 'utf8').digest();
      return timingSafeEqual(a, b);
    },
  };
}
