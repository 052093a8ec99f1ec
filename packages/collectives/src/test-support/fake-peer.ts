import { connect, createServer, type Socket } from 'node:net';
import { WebSocket } from 'ws';
import type { AbortReason } from '../errors.js';
import { StoreClient } from '../rendezvous/store-client.js';
import { StoreServer } from '../rendezvous/store-server.js';
import type { Transport } from '../transport-contract.js';
import { TcpTransport } from '../transports/tcp/tcp-transport.js';
import { encodeFrame, encodeHello, FrameKind } from '../transports/framed/frame.js';
import { WsTransport } from '../transports/ws/ws-transport.js';

/**
 * A world of two where rank 0 is a real `tcp` or `ws` transport and rank 1 is the test: it passes
 * the handshake with the right token, then writes whatever bytes the test wants where rank 0 reads
 * (tcp: a stream; ws: one message per `write`). For fuzzing the frame readers after the hello.
 */
export interface FakePeerWorld {
  readonly real: Transport;
  /** Resolves with the first abort reason of `real`. */
  readonly aborted: Promise<AbortReason>;
  write(bytes: Uint8Array | string): void;
  /** Ends rank 1's connection (the real rank then sees its peer gone, if nothing else first). */
  end(): void;
  close(): Promise<void>;
}

const TOKEN = 'fake-peer-token';

function hello(): Uint8Array {
  return encodeFrame(
    { kind: FrameKind.hello, tag: 0, seq: 0, sender: 1 },
    encodeHello(1, 2, TOKEN),
  );
}

async function stores(): Promise<{ server: StoreServer; clients: StoreClient[] }> {
  const server = new StoreServer({ port: 0, worldSize: 2, token: TOKEN });
  const port = await server.listen();
  const url = `ws://127.0.0.1:${port}`;
  const clients = await Promise.all(
    [0, 1].map((rank) => StoreClient.connect({ url, rank, worldSize: 2, token: TOKEN })),
  );
  return { server, clients };
}

/** Rank 0 a real transport of `kind` with `maxMessageBytes`; rank 1 the test. */
export async function fakePeerWorld(
  kind: 'tcp' | 'ws',
  maxMessageBytes: number,
): Promise<FakePeerWorld> {
  const { server, clients } = await stores();
  const [store0, store1] = clients as [StoreClient, StoreClient];
  const closeStores = async () => {
    await Promise.all(clients.map((c) => c.close()));
    await server.close();
  };
  if (kind === 'tcp') {
    let resolveAccepted: (socket: Socket) => void = () => {};
    const accepted = new Promise<Socket>((resolve) => {
      resolveAccepted = resolve;
    });
    const fake = createServer((socket) => {
      socket.on('error', () => {});
      resolveAccepted(socket);
    });
    await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
    const fakePort = (fake.address() as { port: number }).port;
    await store1.set('tcp/addr/1', JSON.stringify({ host: '127.0.0.1', port: fakePort }));
    const realPromise = TcpTransport.create({ store: store0, token: TOKEN, maxMessageBytes });
    const addr0 = JSON.parse(await store1.get('tcp/addr/0')) as { port: number };
    const dial = connect({ host: '127.0.0.1', port: addr0.port });
    dial.on('error', () => {});
    dial.on('connect', () => dial.write(hello()));
    const real = await realPromise;
    const send = await accepted;
    return {
      real,
      aborted: new Promise((resolve) => real.onAbort(resolve)),
      write: (bytes) => send.write(bytes),
      end: () => send.end(),
      async close() {
        send.destroy();
        dial.destroy();
        await real.close();
        await new Promise<void>((resolve) => fake.close(() => resolve()));
        await closeStores();
      },
    };
  }
  await store1.set('ws/url/1', 'null');
  const realPromise = WsTransport.create({ store: store0, token: TOKEN, maxMessageBytes });
  const url = JSON.parse(await store1.get('ws/url/0')) as string;
  const socket = new WebSocket(url);
  socket.on('error', () => {});
  await new Promise((resolve) => socket.once('open', resolve));
  const answered = new Promise((resolve) => socket.once('message', resolve));
  socket.send(hello());
  await answered;
  const real = await realPromise;
  return {
    real,
    aborted: new Promise((resolve) => real.onAbort(resolve)),
    write: (bytes) => {
      if (socket.readyState === socket.OPEN) socket.send(bytes);
    },
    end: () => socket.close(),
    async close() {
      socket.terminate();
      await real.close();
      await closeStores();
    },
  };
}
