import { type AddressInfo, createServer } from 'node:net';
import { ArgumentError } from '@webshard/tensor-core';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { resolveRendezvousOptions, storeBindAddress } from './env.js';
import { RendezvousError } from './errors.js';
import { rendezvous } from './rendezvous.js';
import { StoreClient } from './store-client.js';
import { StoreServer } from './store-server.js';
import { makeTestCertificate } from '../test-support/certificate.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function startServer(worldSize: number, token = 'secret'): Promise<string> {
  const server = new StoreServer({ port: 0, worldSize, token });
  const port = await server.listen();
  cleanups.push(() => server.close());
  return `ws://127.0.0.1:${port}`;
}

async function joinStore(url: string, rank: number, worldSize: number, token = 'secret') {
  const client = await StoreClient.connect({ url, rank, worldSize, token, timeoutMs: 5000 });
  cleanups.push(() => client.close());
  return client;
}

describe('rendezvous store', () => {
  it('sets, gets, adds, waits and compare-sets across clients', async () => {
    const url = await startServer(2);
    const [a, b] = await Promise.all([joinStore(url, 0, 2), joinStore(url, 1, 2)]);
    const pending = b.get('addr/0');
    await a.set('addr/0', '10.0.0.1:4000');
    expect(await pending).toBe('10.0.0.1:4000');
    expect(await a.add('count', 2)).toBe(2);
    expect(await b.add('count', 5)).toBe(7);
    expect(await a.check(['count', 'addr/0'])).toBe(true);
    expect(await a.check(['count', 'nope'])).toBe(false);
    expect(await a.compareSet('leader', '', 'rank0')).toBe('rank0');
    expect(await b.compareSet('leader', '', 'rank1')).toBe('rank0');
    expect(await b.compareSet('leader', 'rank0', 'rank1')).toBe('rank1');
    const waiting = a.wait(['k1', 'k2'], 5000);
    await b.set('k1', 'x');
    await b.set('k2', 'y');
    await waiting;
    expect(await a.delete('k1')).toBe(true);
    expect(await a.delete('k1')).toBe(false);
  });

  it('reports the keys a wait never saw', async () => {
    const url = await startServer(1);
    const a = await joinStore(url, 0, 1);
    await a.set('present', '1');
    const error = await a.wait(['present', 'absent'], 50).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RendezvousError);
    expect((error as RendezvousError).code).toBe('E_TIMEOUT');
    expect((error as RendezvousError).missingKeys).toEqual(['absent']);
    expect((error as Error).message).toBe('[wait] rank 0: timed out; keys never set: absent');
  });

  it('lists the ranks that never arrived at a timed-out barrier', async () => {
    const url = await startServer(4);
    const clients = await Promise.all([0, 1, 2, 3].map((rank) => joinStore(url, rank, 4)));
    const results = await Promise.allSettled([
      clients[0]!.barrier('step', 200),
      clients[2]!.barrier('step', 200),
    ]);
    for (const result of results) {
      expect(result.status).toBe('rejected');
      const error = (result as PromiseRejectedResult).reason as RendezvousError;
      expect(error).toBeInstanceOf(RendezvousError);
      expect(error.missingRanks).toEqual([1, 3]);
      expect(error.message).toContain(
        "'step' timed out after 200 ms; ranks that never arrived: 1, 3",
      );
    }
    await Promise.all(clients.map((client) => client.barrier('all', 5000)));
  });

  it('refuses a wrong token, a duplicate rank and a wrong world size', async () => {
    const url = await startServer(2);
    const wrong = await StoreClient.connect({ url, rank: 1, worldSize: 2, token: 'guess' }).catch(
      (e: unknown) => e,
    );
    expect(wrong).toBeInstanceOf(RendezvousError);
    expect((wrong as RendezvousError).code).toBe('E_AUTH');
    expect((wrong as Error).message).toBe(
      `[rendezvous] rank 1: join refused by ${url}: [hello] rank 1: wrong token`,
    );
    await joinStore(url, 1, 2);
    const duplicate = await joinStore(url, 1, 2).catch((e: unknown) => e);
    expect((duplicate as Error).message).toContain('rank 1 has already joined');
    const world = await joinStore(url, 0, 3).catch((e: unknown) => e);
    expect((world as Error).message).toContain("world size 3 does not match the store's 2");
  });

  it('survives garbage from a raw socket and keeps serving', async () => {
    const url = await startServer(2);
    const garbage = [
      'not json',
      '{"id":1}',
      '[1,2]',
      '{"id":"x","op":"set"}',
      '{"id":1,"op":"set","key":"k"}',
    ];
    for (const text of garbage) {
      const raw = new WebSocket(url);
      const closed = new Promise<number>((resolve) => raw.on('close', (code) => resolve(code)));
      raw.on('open', () => raw.send(text));
      expect(await closed).toBe(4001);
    }
    const binary = new WebSocket(url);
    const closed = new Promise<number>((resolve) => binary.on('close', (code) => resolve(code)));
    binary.on('open', () => binary.send(new Uint8Array([0xff, 0, 1, 2])));
    expect(await closed).toBe(4001);
    const client = await joinStore(url, 0, 2);
    await client.set('still', 'alive');
    expect(await client.get('still')).toBe('alive');
  });

  it('tells the other ranks when a joined rank drops without saying goodbye', async () => {
    const url = await startServer(2);
    const a = await joinStore(url, 0, 2);
    const raw = new WebSocket(url);
    await new Promise((resolve) => raw.on('open', resolve));
    const joined = new Promise((resolve) => raw.on('message', resolve));
    raw.send(JSON.stringify({ id: 1, op: 'hello', token: 'secret', rank: 1, worldSize: 2 }));
    await joined;
    const lost = new Promise<number>((resolve) => a.onRankLost(resolve));
    raw.terminate();
    expect(await lost).toBe(1);
  });

  it('fails a join with E_TIMEOUT when nobody listens', async () => {
    const error = await StoreClient.connect({
      url: 'ws://127.0.0.1:1',
      rank: 1,
      worldSize: 2,
      timeoutMs: 100,
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RendezvousError);
    expect((error as RendezvousError).code).toBe('E_TIMEOUT');
  });

  it('joins through rendezvous() with torchrun-style options, rank 0 hosting', async () => {
    const r0 = await rendezvous({ rank: 0, worldSize: 2, masterPort: 0, token: 't' });
    const port = r0.options.masterPort;
    const other = await rendezvous({ rank: 1, worldSize: 2, masterPort: port, token: 't' });
    await Promise.all([r0.store.barrier('x', 5000), other.store.barrier('x', 5000)]);
    await other.close();
    await r0.close();
  });

  it('explains a busy MASTER_PORT in one line naming the port, not a raw EADDRINUSE', async () => {
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const port = (holder.address() as AddressInfo).port;
    try {
      const error = await rendezvous({ rank: 0, worldSize: 1, masterPort: port }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(RendezvousError);
      expect((error as RendezvousError).code).toBe('E_PORT_IN_USE');
      expect((error as Error).message).toBe(
        `[rendezvous] rank 0: rank 0's store cannot listen on 127.0.0.1:${port} (MASTER_PORT or masterPort): the port is in use by another process (another job, or an earlier run still holding it); give every rank the same free port, or stop what holds it`,
      );
    } finally {
      holder.close();
    }
  });

  it('serves wss:// with a self-signed certificate made by openssl', async () => {
    const { cert, key, remove } = makeTestCertificate();
    cleanups.push(async () => remove());
    const r0 = await rendezvous({
      rank: 0,
      worldSize: 1,
      masterPort: 0,
      tls: { cert, key, ca: cert },
    });
    await r0.store.set('secure', 'yes');
    expect(await r0.store.get('secure')).toBe('yes');
    await r0.close();
  });
});

describe('resolveRendezvousOptions', () => {
  it('reads torchrun variables and the token, options first', () => {
    const env = {
      RANK: '2',
      WORLD_SIZE: '4',
      LOCAL_RANK: '0',
      MASTER_ADDR: '10.1.2.3',
      MASTER_PORT: '1234',
      WEBSHARD_TOKEN: 'tok',
    };
    const options = resolveRendezvousOptions({ timeoutMs: 5 }, env);
    expect(options).toEqual({
      rank: 2,
      worldSize: 4,
      localRank: 0,
      masterAddr: '10.1.2.3',
      masterPort: 1234,
      token: 'tok',
      timeoutMs: 5,
    });
    expect(storeBindAddress(options)).toBe('10.1.2.3');
    expect(resolveRendezvousOptions({ rank: 1 }, env).rank).toBe(1);
    expect(storeBindAddress(resolveRendezvousOptions({ masterAddr: '127.0.0.1' }, env))).toBe(
      '127.0.0.1',
    );
  });

  it('rejects missing and malformed values', () => {
    expect(() => resolveRendezvousOptions({}, {})).toThrow(
      new ArgumentError('rendezvous', 'rank is required (option, RANK or SLURM_PROCID)'),
    );
    expect(() => resolveRendezvousOptions({}, { RANK: 'x', WORLD_SIZE: '2' })).toThrow(
      "[rendezvous] RANK must be a non-negative integer, got 'x'",
    );
    expect(() => resolveRendezvousOptions({ rank: 2, worldSize: 2 }, {})).toThrow(
      '[rendezvous] rank 2 is outside [0, 2) (worldSize 2): ranks run from 0 to the world size - 1',
    );
    expect(() => resolveRendezvousOptions({}, { RANK: '3', WORLD_SIZE: '2' })).toThrow(
      new ArgumentError(
        'rendezvous',
        'RANK=3 is outside [0, 2) (WORLD_SIZE=2): ranks run from 0 to the world size - 1',
      ),
    );
  });

  it('refuses to bind a non-loopback address without a token', () => {
    expect(() => new StoreServer({ port: 0, worldSize: 2, host: '0.0.0.0' })).toThrow(
      '[rendezvous] binding to 0.0.0.0 needs a join token (option token or WEBSHARD_TOKEN)',
    );
  });
});
