import { ArgumentError } from '@webshard/tensor-core';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { RendezvousError } from './errors.js';
import { rendezvous } from './rendezvous.js';
import { StoreClient } from './store-client.js';
import { resolveStoreLimits } from './store-limits.js';
import { StoreServer } from './store-server.js';

const MiB = 1 << 20;

async function world(limits?: { maxValueBytes?: number; maxClientBytes?: number }) {
  const server = new StoreServer({
    port: 0,
    worldSize: 2,
    token: 't',
    ...(limits === undefined ? {} : { limits }),
  });
  const port = await server.listen();
  const url = `ws://127.0.0.1:${port}`;
  const clients = await Promise.all(
    [0, 1].map((rank) => StoreClient.connect({ url, rank, worldSize: 2, token: 't' })),
  );
  return {
    server,
    clients: clients as [StoreClient, StoreClient],
    async close() {
      await Promise.all(clients.map((client) => client.close()));
      await server.close();
    },
  };
}

async function refusal(call: Promise<unknown>): Promise<RendezvousError> {
  const error = await call.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(RendezvousError);
  expect((error as RendezvousError).code).toBe('E_STORE_LIMIT');
  return error as RendezvousError;
}

afterEach(() => {
  vi.unstubAllEnvs();
});

/** #33 item 7: 48 keys of 2 MiB grew the store by 131 MiB ([Note: the store's limits]). */
describe("the rendezvous store's limits", () => {
  it('refuses values of 2 MiB, holding none of them', async () => {
    const { server, clients, close } = await world();
    try {
      const value = 'x'.repeat(2 * MiB);
      for (let i = 0; i < 8; i++) {
        const error = await refusal(clients[1].set(`big/${i}`, value));
        expect(error.message).toBe(
          `[set] rank 1: the value of key 'big/${i}' is ${2 * MiB} bytes, over the store's limit of ${MiB} bytes per value (storeLimits.maxValueBytes or WEBSHARD_STORE_MAX_VALUE_BYTES)`,
        );
      }
      expect(server.quota.usedBy(1)).toBe(0);
      expect(await clients[0].check(['big/0'])).toBe(false);
    } finally {
      await close();
    }
  }, 60_000);

  it('holds at most 16 MiB per client; another client still writes, and a delete gives bytes back', async () => {
    const { server, clients, close } = await world();
    try {
      const value = 'y'.repeat(512 * 1024);
      let stored = 0;
      let error: RendezvousError | null = null;
      for (let i = 0; i < 48 && error === null; i++) {
        await clients[1].set(`k/${i}`, value).then(
          () => stored++,
          async (e: unknown) => {
            error = await refusal(Promise.reject(e));
          },
        );
      }
      const perKey = 'k/0'.length + value.length;
      expect(stored).toBe(Math.floor((16 * MiB) / (perKey + 1)));
      expect(server.quota.usedBy(1)).toBeLessThanOrEqual(16 * MiB);
      const held = server.quota.usedBy(1);
      const key = `k/${stored}`;
      expect(error!.message).toBe(
        `[set] rank 1: setting key '${key}' would make rank 1 hold ${held + key.length + value.length} bytes of keys and values in the store, over its limit of ${16 * MiB} bytes per client (storeLimits.maxClientBytes or WEBSHARD_STORE_MAX_CLIENT_BYTES)`,
      );
      await clients[0].set('other', value);
      expect(await clients[1].delete('k/0')).toBe(true);
      await clients[1].set(key, value);
      expect(server.quota.usedBy(1)).toBe(held + key.length - 'k/0'.length);
    } finally {
      await close();
    }
  }, 60_000);

  it('takes its limits from the environment on rank 0, and refuses a bad one naming the variable', async () => {
    vi.stubEnv('WEBSHARD_STORE_MAX_VALUE_BYTES', '1000');
    const joined = await rendezvous({ rank: 0, worldSize: 1, masterPort: 0, timeoutMs: 5000 });
    try {
      await joined.store.set('fits', 'z'.repeat(1000));
      const error = await refusal(joined.store.set('over', 'z'.repeat(1001)));
      expect(error.message).toMatch(/is 1001 bytes, over the store's limit of 1000 bytes/);
      // Bytes, not characters: 501 two-byte characters and a four-byte one.
      const wide = await refusal(joined.store.set('wide', `${'é'.repeat(501)}`));
      expect(wide.message).toMatch(/is 1002 bytes/);
      await joined.store.set('emoji', `${'z'.repeat(996)}\u{1F600}`);
      await refusal(joined.store.set('emoji2', `${'z'.repeat(997)}\u{1F600}`));
    } finally {
      await joined.close();
    }
    vi.stubEnv('WEBSHARD_STORE_MAX_CLIENT_BYTES', '16M');
    await expect(rendezvous({ rank: 0, worldSize: 1, masterPort: 0 })).rejects.toThrow(
      new ArgumentError(
        'rendezvous',
        'WEBSHARD_STORE_MAX_CLIENT_BYTES=16M: a store limit must be a whole number of bytes >= 1',
      ),
    );
    expect(resolveStoreLimits({ maxValueBytes: 5 })).toEqual({
      maxValueBytes: 5,
      maxClientBytes: 16 * MiB,
    });
  }, 30_000);
});
