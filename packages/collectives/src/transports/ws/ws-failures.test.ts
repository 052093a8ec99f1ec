import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { type AbortReason, TransportAbortedError } from '../../errors.js';
import { expectPeerLost } from '../../test-support/peer-lost.js';
import { StoreClient } from '../../rendezvous/store-client.js';
import { StoreServer } from '../../rendezvous/store-server.js';
import { createNetworkWorld, runJobInChildren } from '../../test-support/network-world.js';
import type { Channel } from './channel.js';
import { encodeFrame, encodeHello, FrameKind, HEADER_BYTES, writeHeader } from '../framed/frame.js';
import { WsTransport } from './ws-transport.js';

const TOKEN = 'ws-token';
const here = dirname(fileURLToPath(import.meta.url));
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function randomBytes(seed: number, length: number): Uint8Array {
  let x = seed >>> 0 || 1;
  const out = new Uint8Array(length);
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 255;
  }
  return out;
}

function header(fields: { kind?: number; seq?: number; length?: number; sender?: number }) {
  const bytes = new Uint8Array(HEADER_BYTES);
  writeHeader(bytes, {
    kind: (fields.kind ?? FrameKind.data) as 1,
    tag: 0,
    seq: fields.seq ?? 0,
    length: fields.length ?? 0,
    sender: fields.sender ?? 1,
  });
  return bytes;
}

function hello(rank: number, token: string): Uint8Array {
  return encodeFrame(
    { kind: FrameKind.hello, tag: 0, seq: 0, sender: rank },
    encodeHello(rank, 2, token),
  );
}

/** Rank 0 is a real ws transport; rank 1 is the test, over a raw `ws` client. */
async function realAndFake(): Promise<{ real: WsTransport; fake: WebSocket; url: string }> {
  const server = new StoreServer({ port: 0, worldSize: 2, token: TOKEN });
  const port = await server.listen();
  const storeUrl = `ws://127.0.0.1:${port}`;
  const [store0, store1] = await Promise.all(
    [0, 1].map((rank) => StoreClient.connect({ url: storeUrl, rank, worldSize: 2, token: TOKEN })),
  );
  await store1!.set('ws/url/1', 'null');
  const realPromise = WsTransport.create({ store: store0!, token: TOKEN });
  const url = JSON.parse(await store1!.get('ws/url/0')) as string;
  const fake = new WebSocket(url);
  fake.on('error', () => {});
  await new Promise((r) => fake.on('open', r));
  const answered = new Promise((r) => fake.once('message', r));
  fake.send(hello(1, TOKEN));
  await answered;
  const real = await realPromise;
  cleanups.push(async () => {
    fake.terminate();
    await real.close();
    await Promise.all([store0!.close(), store1!.close()]);
    await server.close();
  });
  return { real, fake, url };
}

describe('ws transport under hostile input', () => {
  const hostile: [string, (fake: WebSocket) => void, string][] = [
    ['bad magic', (f) => f.send(new Uint8Array(HEADER_BYTES).fill(9)), 'bad magic 0x09090909'],
    ['a text message', (f) => f.send('hello?'), 'text message'],
    [
      'a short header',
      (f) => f.send(new Uint8Array(10)),
      `expected a ${HEADER_BYTES}-byte header, got 10 bytes`,
    ],
    [
      'a payload longer than announced',
      (f) => {
        f.send(header({ length: 4 }));
        f.send(new Uint8Array(5));
      },
      'payload of 5 bytes after a header announcing 4',
    ],
    [
      'a wrong sequence number',
      (f) => f.send(header({ seq: 3 })),
      'frame 3 on tag 0 out of order (expected 0)',
    ],
    [
      'a relay request for a rank it reaches directly',
      (f) => f.send(header({ kind: FrameKind.relay, length: 40 })),
      'relay frame for rank 0 is not allowed',
    ],
    [
      'a relayed frame from a rank it reaches directly',
      (f) => f.send(header({ kind: FrameKind.relayed, length: 40 })),
      'relayed frame for rank 0 is not allowed',
    ],
  ];
  for (const [what, act, detail] of hostile) {
    it(`aborts naming the peer on ${what}`, async () => {
      const { real, fake } = await realAndFake();
      const pending = real.recv(1, 0, new Uint8Array(4)).catch((e: unknown) => e);
      act(fake);
      const error = (await pending) as TransportAbortedError;
      expect(error).toBeInstanceOf(TransportAbortedError);
      expect(error.reason).toEqual({
        kind: 'error',
        origin: 0,
        peer: 1,
        message: `[ws] rank 0: malformed frame from rank 1: ${detail}`,
      });
    });
  }

  // See the tcp test of the same name: a failed write defers to the abort that names the peer.
  it('fails a send whose write failed with the abort that names the peer', async () => {
    const { real, fake } = await realAndFake();
    const peer = (real as unknown as { peers: { channel: Channel }[] }).peers[1]!;
    peer.channel.send = (_bytes, done) => {
      if (done) setImmediate(() => done(new Error('write ECONNRESET')));
    };
    const sent = real.send(1, 0, new Uint8Array(1024));
    sent.catch(() => {});
    await new Promise((resolve) => setTimeout(resolve, 20));
    fake.terminate();
    await expectPeerLost(sent, 0, 1);
  });

  it('survives random binary garbage from an authenticated peer (20 seeds)', async () => {
    for (let seed = 1; seed <= 20; seed++) {
      const { real, fake } = await realAndFake();
      const reason = new Promise<AbortReason>((r) => real.onAbort(r));
      fake.send(randomBytes(seed, 1 + ((seed * 7919) % 3000)));
      fake.close();
      const got = await reason;
      expect(got.peer, `seed ${seed}`).toBe(1);
      expect(['error', 'peer-lost']).toContain(got.kind);
      await cleanups.pop()!();
    }
  });

  it('drops connections with a wrong or no token or garbage and keeps working', async () => {
    const world = await createNetworkWorld('ws', 2, TOKEN);
    cleanups.push(() => world.close());
    const [t0, t1] = world.transports as [WsTransport, WsTransport];
    const url = JSON.parse(await world.stores[0]!.get('ws/url/0')) as string;
    const attempts: (Uint8Array | string)[] = [
      hello(1, 'wrong'),
      hello(1, ''),
      hello(5, TOKEN),
      'text',
      header({}),
    ];
    for (let seed = 1; seed <= 20; seed++)
      attempts.push(randomBytes(seed, 1 + ((seed * 131) % 2000)));
    await Promise.all(
      attempts.map(
        (message) =>
          new Promise<void>((done) => {
            const socket = new WebSocket(url);
            socket.on('open', () => socket.send(message));
            socket.on('error', () => done());
            socket.on('close', () => done());
          }),
      ),
    );
    expect(t0.abortReason).toBeNull();
    expect(t0.rejectedConnections).toBe(attempts.length);
    const dst = new Int32Array(2);
    await Promise.all([
      t1.send(0, 4, new Uint8Array(Int32Array.from([7, -9]).buffer)),
      t0.recv(1, 4, new Uint8Array(dst.buffer)),
    ]);
    expect(Array.from(dst)).toEqual([7, -9]);
  });

  it('forwards an abort to every rank with the same reason', async () => {
    const world = await createNetworkWorld('ws', 3, TOKEN);
    cleanups.push(() => world.close());
    const reasons = world.transports
      .slice(1)
      .map((t) => new Promise<AbortReason>((r) => t.onAbort(r)));
    const reason: AbortReason = { kind: 'mismatch', origin: 0, message: 'ranks disagree' };
    world.transports[0]!.abort(reason);
    expect(await Promise.all(reasons)).toEqual([reason, reason]);
  });

  it('runs the collective cases with ranks as separate processes', async () => {
    const reports = await runJobInChildren('ws', 3, { kind: 'cases', seed: 78 });
    for (const report of reports) {
      expect(report!.cases.length).toBeGreaterThan(100);
      expect(report!.cases.filter((c) => c.failure !== null)).toEqual([]);
    }
  });
});

describe('ws transport in browsers', () => {
  // The browser path: what ws-transport.ts imports statically, followed through this package.
  // Node-only modules must only be reached through dynamic import().
  it('reaches no Node-only module through static imports', () => {
    const seen = new Set<string>();
    const offenders: string[] = [];
    const visit = (file: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      const source = readFileSync(file, 'utf8');
      for (const match of source.matchAll(/^import\s+(?!type\b)[^;]*?from\s+'([^']+)'/gm)) {
        const specifier = match[1]!;
        if (specifier.startsWith('node:') || specifier === 'ws')
          offenders.push(`${file}: ${specifier}`);
        if (specifier.startsWith('.'))
          visit(resolve(dirname(file), specifier.replace(/\.js$/, '.ts')));
      }
    };
    visit(join(here, 'ws-transport.ts'));
    visit(join(here, '..', '..', 'rendezvous', 'store-client.ts'));
    visit(join(here, '..', '..', 'rendezvous', 'rendezvous.ts'));
    visit(join(here, '..', '..', 'connect-transport.ts'));
    expect(offenders).toEqual([]);
    expect(seen.size).toBeGreaterThan(8);
  });
});
