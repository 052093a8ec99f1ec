import { request } from 'node:http';
import { get as httpsGet } from 'node:https';
import { ArgumentError } from '@webshard/tensor-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { makeTestCertificate, type TestCertificate } from '../test-support/certificate.js';
import { ElasticCoordinator } from './coordinator.js';
import { type ElasticGroup, joinElastic } from './elastic-group.js';

// [Note: an elastic world over TLS], end to end in one process: a coordinator serving wss:// with
// a self-signed certificate for 127.0.0.1, members that trust it, their data over wss://; plain
// clients get nothing in the clear.
let certificate: TestCertificate;
let coordinator: ElasticCoordinator | undefined;
const members: ElasticGroup[] = [];

beforeAll(() => {
  certificate = makeTestCertificate();
});
afterAll(() => certificate.remove());
afterEach(async () => {
  await Promise.all(members.splice(0).map((m) => m.close()));
  await coordinator?.close();
  coordinator = undefined;
});

function startCoordinator(): Promise<ElasticCoordinator> {
  return ElasticCoordinator.start({
    minWorldSize: 3,
    maxWorldSize: 3,
    token: 'tls-token',
    tls: { cert: certificate.cert, key: certificate.key },
  });
}

/** How a plain (non-TLS) client fares on `port`: `http`, `ws` or the error it met. */
function plainHttp(port: number): Promise<string> {
  return new Promise((resolve) => {
    const sent = request({ host: '127.0.0.1', port, path: '/' }, (response) =>
      resolve(`answered ${response.statusCode}`),
    );
    sent.on('error', (error: NodeJS.ErrnoException) => resolve(`error ${error.code}`));
    sent.end();
  });
}

function plainWs(url: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = new WebSocket(url);
    socket.on('open', () => {
      socket.terminate();
      resolve('open');
    });
    socket.on('error', (error: NodeJS.ErrnoException) => resolve(`error ${error.code}`));
  });
}

describe('an elastic world over TLS', () => {
  it('3 members join at wss:// (one listens on nothing) and reduce exactly; its stores are wss:// too', async () => {
    coordinator = await startCoordinator();
    expect(coordinator.url).toMatch(/^wss:\/\/127\.0\.0\.1:\d+$/);
    const tls = { cert: certificate.cert, key: certificate.key, ca: certificate.cert };
    const joined = await Promise.all(
      [true, true, false].map((listen) =>
        joinElastic({
          url: coordinator!.url,
          token: 'tls-token',
          backend: 'ws',
          connectTimeoutMs: 20_000,
          listen,
          // The member that listens on nothing needs no certificate: only the CA it trusts.
          tls: listen ? tls : { ca: certificate.cert },
        }),
      ),
    );
    members.push(...joined);
    expect(coordinator.history[0]!.storeUrl).toMatch(/^wss:\/\/127\.0\.0\.1:\d+$/);
    const results = await Promise.all(
      joined.map(async (member) => {
        const data = Float32Array.from(
          { length: 1000 },
          (_, i) => (member.membership.rank + 1) * i,
        );
        await member.group.allReduce(data).wait();
        return data;
      }),
    );
    // 1 + 2 + 3 = 6 times i, exact in f32 for these integers.
    for (const data of results) {
      expect(Array.from(data.subarray(0, 4))).toEqual([0, 6, 12, 18]);
      expect(data[999]).toBe(5994);
    }
  }, 60_000);

  it('a plain http or ws client on the coordinator port gets nothing in the clear; https without an upgrade gets 426', async () => {
    coordinator = await startCoordinator();
    const port = coordinator.port;
    expect(await plainHttp(port)).toBe('error ECONNRESET');
    expect(await plainWs(`ws://127.0.0.1:${port}`)).toBe('error ECONNRESET');
    // Over TLS, a page request that is no WebSocket upgrade gets 426 Upgrade Required.
    const status = await new Promise<number | undefined>((resolve, reject) =>
      httpsGet(`https://127.0.0.1:${port}/`, { ca: Buffer.from(certificate.cert) }, (response) => {
        response.resume();
        resolve(response.statusCode);
      }).on('error', reject),
    );
    expect(status).toBe(426);
  });

  it('a member given tls refuses a ws:// coordinator URL, naming it', async () => {
    await expect(
      joinElastic({ url: 'ws://127.0.0.1:9', tls: { ca: certificate.cert }, timeoutMs: 1000 }),
    ).rejects.toThrow(
      new ArgumentError(
        'join',
        "tls is given but the coordinator's URL ws://127.0.0.1:9 is not wss://: the join token would cross the network in the clear",
      ),
    );
  });

  it('a member given tls over tcp is refused: tcp has no TLS', async () => {
    await expect(
      joinElastic({ url: 'wss://127.0.0.1:9', tls: { ca: certificate.cert }, backend: 'tcp' }),
    ).rejects.toThrow(
      new ArgumentError(
        'join',
        "tls is given with backend 'tcp', which has no TLS (its data and join token would travel in the clear): use backend 'ws'",
      ),
    );
  });

  it('a member given tls that would listen without a certificate is refused at once', async () => {
    await expect(
      joinElastic({ url: 'wss://127.0.0.1:9', tls: { ca: certificate.cert }, backend: 'ws' }),
    ).rejects.toThrow(
      new ArgumentError(
        'join',
        'tls needs cert and key for this member to listen on wss:// (or listen: false, behind a NAT)',
      ),
    );
  });

  it('a member that does not trust the certificate cannot join', async () => {
    coordinator = await startCoordinator();
    await expect(
      joinElastic({ url: coordinator.url, token: 'tls-token', timeoutMs: 1500 }),
    ).rejects.toThrow(
      /could not reach the coordinator at wss:\/\/127\.0\.0\.1:\d+ within 1500 ms: .*self-signed certificate/,
    );
  });
});
