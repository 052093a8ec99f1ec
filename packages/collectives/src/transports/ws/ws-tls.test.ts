import { join } from 'node:path';
import { ArgumentError } from '@webshard/tensor-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { freePort } from '../../launcher/launcher.js';
import { ProcessGroup } from '../../process-group.js';
import { createNetworkTransport } from '../../connect-transport.js';
import { initProcessGroup } from '../../init-process-group.js';
import { type Rendezvous, rendezvous } from '../../rendezvous/rendezvous.js';
import { StoreClient } from '../../rendezvous/store-client.js';
import { StoreServer } from '../../rendezvous/store-server.js';
import { shardRange } from '../../shard.js';
import { makeTestCertificate, type TestCertificate } from '../../test-support/certificate.js';
import type { Transport } from '../../transport-contract.js';
import { WsTransport } from './ws-transport.js';

// [Note: ws over TLS], end to end: the store and every data connection over wss://, with a
// self-signed certificate for 127.0.0.1 that openssl makes for this file (EC P-256: fast).
let certificate: TestCertificate | undefined;
let dir = '';
let cert: Buffer;
let key: Buffer;
let tls: { cert: Buffer; key: Buffer; ca: Buffer };

beforeAll(() => {
  certificate = makeTestCertificate();
  dir = certificate.dir;
  cert = Buffer.from(certificate.cert);
  key = Buffer.from(certificate.key);
  tls = { cert, key, ca: cert };
});
afterAll(() => certificate?.remove());

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** `size` ranks joined over wss:// in this process, each with its ws transport. */
async function tlsWorld(size: number): Promise<{ joined: Rendezvous[]; transports: Transport[] }> {
  const masterPort = await freePort();
  const joined = await Promise.all(
    Array.from({ length: size }, (_, rank) =>
      rendezvous({ rank, worldSize: size, masterPort, token: 'tls', timeoutMs: 10_000, tls }),
    ),
  );
  const transports = await Promise.all(joined.map((j) => createNetworkTransport('ws', j)));
  cleanups.push(async () => {
    await Promise.all(transports.map((t) => t.close()));
    await Promise.all(joined.map((j) => j.close()));
  });
  return { joined, transports };
}

function connectionOutcome(url: string, options: { ca?: Buffer } = {}): Promise<string> {
  return new Promise((resolve) => {
    const socket = new WebSocket(url, options);
    socket.on('open', () => {
      socket.terminate();
      resolve('open');
    });
    socket.on('error', (error) => resolve(`error: ${error.message}`));
  });
}

describe('ws transport over TLS', () => {
  for (const size of [2, 3]) {
    it(`joins ${size} ranks with initProcessGroup over wss:// and reduces across them`, async () => {
      const masterPort = await freePort();
      const groups = await Promise.all(
        Array.from({ length: size }, (_, rank) =>
          initProcessGroup({
            backend: 'ws',
            rank,
            worldSize: size,
            masterPort,
            token: 'tls',
            timeoutMs: 10_000,
            tls,
            // Small segments: the ring, not only direct exchange, runs over TLS.
            group: { segmentBytes: 4096, smallMessageBytes: 1024 },
          }),
        ),
      );
      cleanups.push(async () => {
        await Promise.all(groups.map((g) => g.close()));
      });
      const count = 10_007;
      const inputs = groups.map((g) => Float32Array.from({ length: count }, (_, i) => i + g.rank));
      await Promise.all(groups.map((g, r) => g.allReduce(inputs[r]!).wait()));
      const base = (size * (size - 1)) / 2;
      for (const data of inputs) {
        expect(data[0]).toBe(base);
        expect(data[count - 1]).toBe((count - 1) * size + base);
      }
      const shards = groups.map((g) => new Float32Array(shardRange(count, size, g.rank).count));
      await Promise.all(
        groups.map((g, r) => g.reduceScatter(inputs[r]!, shards[r]!, { op: 'max' }).wait()),
      );
      for (const [r, shard] of shards.entries()) {
        const { start } = shardRange(count, size, r);
        expect(shard[0]).toBe(inputs[0]![start]);
      }
    });
  }

  it('advertises wss:// data listeners that refuse plain and untrusted clients', async () => {
    const { joined, transports } = await tlsWorld(2);
    const urls = await Promise.all([0, 1].map((r) => joined[0]!.store.get(`ws/url/${r}`)));
    for (const url of urls) expect(JSON.parse(url)).toMatch(/^wss:\/\/127\.0\.0\.1:\d+$/);
    const url = JSON.parse(urls[0]!) as string;
    // Without the CA the self-signed certificate is not trusted; plain ws:// is no WebSocket.
    expect(await connectionOutcome(url)).toMatch(/^error: .*self[- ]signed certificate/);
    expect(await connectionOutcome(url.replace('wss://', 'ws://'))).toMatch(/^error: /);
    expect(await connectionOutcome(url, { ca: cert })).toBe('open');
    // The world keeps working after those attempts.
    const group0 = ProcessGroup.fromTransport(transports[0]!);
    const group1 = ProcessGroup.fromTransport(transports[1]!);
    const a = Int32Array.from([1, 2]);
    const b = Int32Array.from([10, 20]);
    await Promise.all([group0.allReduce(a).wait(), group1.allReduce(b).wait()]);
    expect(Array.from(a)).toEqual([11, 22]);
  });

  it('refuses to dial a peer that listens without TLS (the token stays off the wire)', async () => {
    const server = new StoreServer({ port: 0, worldSize: 2, token: 't' });
    const port = await server.listen();
    const stores = await Promise.all(
      [0, 1].map((rank) =>
        StoreClient.connect({ url: `ws://127.0.0.1:${port}`, rank, worldSize: 2, token: 't' }),
      ),
    );
    cleanups.push(async () => {
      await Promise.all(stores.map((s) => s.close()));
      await server.close();
    });
    // Rank 0 listens on plain ws://; rank 1 has tls, so it must not dial it.
    const plain = WsTransport.create({ store: stores[0]!, token: 't', timeoutMs: 1500 }).catch(
      (e: unknown) => e,
    );
    const secure = await WsTransport.create({ store: stores[1]!, token: 't', tls }).catch(
      (e: unknown) => e,
    );
    expect(secure).toBeInstanceOf(ArgumentError);
    expect((secure as Error).message).toMatch(
      /^\[ws\] this rank requires TLS but its peer listens on ws:\/\/127\.0\.0\.1:\d+: give every rank the same tls options$/,
    );
    expect(await plain).toBeInstanceOf(Error);
  });

  it('refuses tls without a key on a listening rank, and tls with the tcp transport', async () => {
    const masterPort = await freePort();
    await expect(
      rendezvous({ rank: 0, worldSize: 1, masterPort, tls: { ca: cert } }),
    ).rejects.toThrow(
      new ArgumentError('rendezvous', 'rank 0 hosts the store: tls needs cert and key there'),
    );
    const store = new StoreServer({ port: 0, worldSize: 1, token: 'k' });
    const port = await store.listen();
    const client = await StoreClient.connect({
      url: `ws://127.0.0.1:${port}`,
      rank: 0,
      worldSize: 1,
      token: 'k',
    });
    cleanups.push(async () => {
      await client.close();
      await store.close();
    });
    await expect(
      WsTransport.create({ store: client, token: 'k', tls: { ca: cert } }),
    ).rejects.toThrow(
      '[ws] tls needs cert and key on every rank that accepts connections (or listen: false)',
    );
    await expect(
      initProcessGroup({ backend: 'tcp', rank: 0, worldSize: 1, masterPort, tls }),
    ).rejects.toThrow(
      "[tcp] the tcp transport has no TLS (its data and join token would travel in the clear): use backend 'ws' with tls",
    );
  });
});

describe('TLS from the environment (as webshard-run passes it to its ranks)', () => {
  const names = ['WEBSHARD_TLS_CERT', 'WEBSHARD_TLS_KEY', 'WEBSHARD_TLS_CA'] as const;
  afterEach(() => {
    for (const name of names) delete process.env[name];
  });

  it('joins over wss:// with the PEM files named by WEBSHARD_TLS_*', async () => {
    process.env.WEBSHARD_TLS_CERT = join(dir, 'cert.pem');
    process.env.WEBSHARD_TLS_KEY = join(dir, 'key.pem');
    process.env.WEBSHARD_TLS_CA = join(dir, 'cert.pem');
    const masterPort = await freePort();
    const joined = await Promise.all(
      [0, 1].map((rank) =>
        rendezvous({ rank, worldSize: 2, masterPort, token: 'tls', timeoutMs: 10_000 }),
      ),
    );
    const transports = await Promise.all(joined.map((j) => createNetworkTransport('ws', j)));
    cleanups.push(async () => {
      await Promise.all(transports.map((t) => t.close()));
      await Promise.all(joined.map((j) => j.close()));
    });
    for (const j of joined) expect(j.options.tls?.ca).toEqual(cert);
    const groups = transports.map((t) => ProcessGroup.fromTransport(t));
    const data = groups.map((g) => new Float32Array([g.rank + 1, 10]));
    await Promise.all(groups.map((g, r) => g.allReduce(data[r]!).wait()));
    for (const d of data) expect(Array.from(d)).toEqual([3, 20]);
  });

  it('names the variable when its file cannot be read', async () => {
    process.env.WEBSHARD_TLS_CA = join(dir, 'missing.pem');
    const error = await rendezvous({
      rank: 1,
      worldSize: 2,
      masterPort: await freePort(),
      token: 'tls',
      timeoutMs: 1000,
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ArgumentError);
    expect((error as Error).message).toContain(
      `[rendezvous] WEBSHARD_TLS_CA=${join(dir, 'missing.pem')} cannot be read: ENOENT`,
    );
  });
});
