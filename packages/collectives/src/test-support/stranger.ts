import { spawn } from 'node:child_process';
import { connect as netConnect, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { connect as tlsConnect } from 'node:tls';
import { fileURLToPath } from 'node:url';
import type { PreAuthGuard, PreAuthLimits } from '../pre-auth-guard.js';
import { StoreClient } from '../rendezvous/store-client.js';
import { StoreServer } from '../rendezvous/store-server.js';
import type { Transport } from '../transport-contract.js';
import { TcpTransport } from '../transports/tcp/tcp-transport.js';
import { WsTransport } from '../transports/ws/ws-transport.js';
import { makeTestCertificate } from './certificate.js';

/** The ports a rank listens on. */
export type PortKind = 'store' | 'tcp' | 'ws' | 'wss';

/** One listening port under test, and a check that its owners still work. */
export interface PortUnderTest {
  readonly port: number;
  /** Speaks TLS (strangers connect with TLS and trust anything). */
  readonly tls: boolean;
  /** Speaks WebSocket: a stranger upgrades first. */
  readonly websocket: boolean;
  /** The store's guard (the data ports' guards are inside their listeners). */
  readonly guard?: PreAuthGuard;
  /** Resolves when the port's owners still do their job (a store round trip, a message). */
  alive(): Promise<void>;
  close(): Promise<void>;
}

const TOKEN = 'stranger-test-token';

async function message(from: Transport, to: Transport): Promise<void> {
  const got = new Uint8Array(4);
  await Promise.all([
    from.send(to.rank, 7, new Uint8Array([1, 2, 3, 4])),
    to.recv(from.rank, 7, got),
  ]);
  if (got.join() !== '1,2,3,4') throw new Error(`received ${got.join()}`);
}

/** Starts the port of `kind` with `preAuth` (a store, or rank 0's listener in a world of two). */
export async function startPort(kind: PortKind, preAuth: PreAuthLimits): Promise<PortUnderTest> {
  const server = new StoreServer({
    port: 0,
    worldSize: 2,
    token: TOKEN,
    ...(kind === 'store' ? { preAuth } : {}),
  });
  const storePort = await server.listen();
  const url = `ws://127.0.0.1:${storePort}`;
  const stores = await Promise.all(
    [0, 1].map((rank) => StoreClient.connect({ url, rank, worldSize: 2, token: TOKEN })),
  );
  const closeStores = async () => {
    for (const store of stores) await store.close();
    await server.close();
  };
  if (kind === 'store') {
    return {
      port: storePort,
      tls: false,
      websocket: true,
      guard: server.guard,
      async alive() {
        await stores[0]!.set('alive', 'yes');
        if ((await stores[1]!.get('alive')) !== 'yes') throw new Error('store lost a value');
      },
      close: closeStores,
    };
  }
  const certificate = kind === 'wss' ? makeTestCertificate() : undefined;
  const tls =
    certificate === undefined
      ? {}
      : { tls: { cert: certificate.cert, key: certificate.key, ca: certificate.cert } };
  const transports: Transport[] = await Promise.all(
    stores.map((store) =>
      kind === 'tcp'
        ? TcpTransport.create({ store, token: TOKEN, preAuth })
        : WsTransport.create({ store, token: TOKEN, preAuth, ...tls }),
    ),
  );
  const published = await stores[1]!.get(kind === 'tcp' ? 'tcp/addr/0' : 'ws/url/0');
  const port =
    kind === 'tcp'
      ? (JSON.parse(published) as { port: number }).port
      : Number(new URL(JSON.parse(published) as string).port);
  return {
    port,
    tls: kind === 'wss',
    websocket: kind !== 'tcp',
    alive: () => message(transports[1]!, transports[0]!),
    async close() {
      await Promise.all(transports.map((t) => t.close()));
      await closeStores();
      certificate?.remove();
    },
  };
}

const UPGRADE =
  'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
  'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n';

/**
 * The head of one masked binary WebSocket frame announcing `length` payload bytes (the payload
 * itself is the caller's to send, or not).
 */
export function webSocketFrameHead(length: number): Buffer {
  const head = Buffer.alloc(14);
  head[0] = 0x82;
  head[1] = 0x80 | 127;
  head.writeBigUInt64BE(BigInt(length), 2);
  return head; // the 4 mask bytes stay zero
}

/** A stranger's connection: raw TCP, or TLS trusting anything. */
export interface Stranger {
  readonly socket: Socket;
  /** Resolves with the milliseconds from connecting until the server dropped the connection. */
  readonly closed: Promise<number>;
  /** Bytes the server sent (an HTTP 101 answer counts; a WebSocket close frame would too). */
  received: number;
}

/**
 * Connects to `target` as a stranger and, once connected, upgrades to WebSocket (when the port
 * speaks it, and `upgrade` is not false) and writes `payload`. It never answers anything.
 */
export function stranger(
  target: Pick<PortUnderTest, 'port' | 'tls' | 'websocket'>,
  payload: Uint8Array[] = [],
  options: { upgrade?: boolean; tcpOnly?: boolean } = {},
): Stranger {
  const started = Date.now();
  const useTls = target.tls && options.tcpOnly !== true;
  const socket: Socket = useTls
    ? tlsConnect({ host: '127.0.0.1', port: target.port, rejectUnauthorized: false })
    : netConnect({ host: '127.0.0.1', port: target.port });
  const result: Stranger = {
    socket,
    received: 0,
    closed: new Promise((resolve) => socket.once('close', () => resolve(Date.now() - started))),
  };
  socket.on('error', () => {});
  socket.on('data', (chunk: Buffer) => {
    result.received += chunk.byteLength;
  });
  socket.once(useTls ? 'secureConnect' : 'connect', () => {
    if (target.websocket && options.upgrade !== false && options.tcpOnly !== true) {
      socket.write(UPGRADE);
    }
    for (const chunk of payload) socket.write(chunk);
  });
  return result;
}

/** A port owned by a child process (`stranger-port-child.ts`), whose memory a test can measure. */
export interface PortInChild extends PortUnderTest {
  /** Starts measuring the child's RSS. */
  resetMemory(): Promise<void>;
  /** The largest growth of the child's RSS since `resetMemory`, in bytes. */
  peakMemory(): Promise<number>;
}

/** Starts the port of `kind` in a child process (`node --import tsx`). */
export async function startPortInChild(
  kind: PortKind,
  preAuth: PreAuthLimits,
): Promise<PortInChild> {
  const script = join(dirname(fileURLToPath(import.meta.url)), 'stranger-port-child.ts');
  const child = spawn(
    process.execPath,
    ['--conditions=@webshard/source', '--import', 'tsx', script, kind, JSON.stringify(preAuth)],
    { stdio: ['pipe', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async (): Promise<Record<string, unknown>> => {
    const line = await lines.next();
    if (line.done) throw new Error(`the port's child process exited:\n${stderr}`);
    return JSON.parse(line.value) as Record<string, unknown>;
  };
  const ask = (command: string) => {
    child.stdin.write(`${command}\n`);
    return next();
  };
  const ready = await next();
  return {
    port: ready.port as number,
    tls: ready.tls as boolean,
    websocket: ready.websocket as boolean,
    alive: async () => {
      await ask('alive');
    },
    resetMemory: async () => {
      await ask('reset');
    },
    peakMemory: async () => (await ask('peak')).bytes as number,
    close: async () => {
      const exited = new Promise((resolve) => child.once('close', resolve));
      child.stdin.end('close\n');
      await exited;
    },
  };
}
