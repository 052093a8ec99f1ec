import { networkInterfaces } from 'node:os';
import { describe, expect, it } from 'vitest';
import { freePort } from './launcher/launcher.js';
import { RendezvousError } from './rendezvous/errors.js';
import { initProcessGroup } from './init-process-group.js';
import { rendezvous } from './rendezvous/rendezvous.js';

describe('initProcessGroup', () => {
  for (const backend of ['tcp', 'ws'] as const) {
    it(`joins ${backend} ranks through the rendezvous and reduces across them`, async () => {
      const masterPort = await freePort();
      const groups = await Promise.all(
        [0, 1, 2].map((rank) =>
          initProcessGroup({
            backend,
            rank,
            worldSize: 3,
            masterPort,
            token: 'init',
            timeoutMs: 10_000,
          }),
        ),
      );
      const data = groups.map((g) => Float32Array.from([g.rank, 0.5, -g.rank * 2]));
      await Promise.all(groups.map((g, i) => g.allReduce(data[i]!).wait()));
      for (const d of data) expect(Array.from(d)).toEqual([3, 1.5, -6]);
      expect(groups.map((g) => [g.rank, g.size])).toEqual([
        [0, 3],
        [1, 3],
        [2, 3],
      ]);
      await Promise.all(groups.map((g) => g.close()));
    });
  }

  it('joins through a non-loopback master address, data listeners on that interface', async () => {
    const external = Object.values(networkInterfaces())
      .flat()
      .find((entry) => entry !== undefined && !entry.internal && entry.family === 'IPv4');
    expect(external, 'this machine has no non-loopback IPv4 address').toBeDefined();
    const masterAddr = external!.address;
    const masterPort = await freePort();
    const groups = await Promise.all(
      [0, 1].map((rank) =>
        initProcessGroup({
          backend: 'tcp',
          rank,
          worldSize: 2,
          masterAddr,
          masterPort,
          token: 'lan',
        }),
      ),
    );
    const data = groups.map((g) => Int32Array.from([g.rank + 5]));
    await Promise.all(groups.map((g, i) => g.allReduce(data[i]!).wait()));
    expect(data.map((d) => d[0])).toEqual([11, 11]);
    await Promise.all(groups.map((g) => g.close()));
  });

  for (const backend of ['tcp', 'ws'] as const) {
    it(`refuses a ${backend} rank that joins with no token, saying so`, async () => {
      const masterPort = await freePort();
      const host = await rendezvous({ rank: 0, worldSize: 2, masterPort, token: 'right' });
      const saved = process.env.WEBSHARD_TOKEN;
      delete process.env.WEBSHARD_TOKEN;
      try {
        const intruder = await initProcessGroup({
          backend,
          rank: 1,
          worldSize: 2,
          masterPort,
          timeoutMs: 2000,
        }).catch((e: unknown) => e);
        expect(intruder).toBeInstanceOf(RendezvousError);
        expect((intruder as RendezvousError).code).toBe('E_AUTH');
        expect((intruder as Error).message).toBe(
          `[rendezvous] rank 1: join refused by ws://127.0.0.1:${masterPort}: [hello] rank 1: no join token given, and this store requires one (token option or WEBSHARD_TOKEN)`,
        );
        expect(host.store.rank).toBe(0);
      } finally {
        if (saved !== undefined) process.env.WEBSHARD_TOKEN = saved;
        await host.close();
      }
    });
  }

  it('refuses a rank with the wrong token', async () => {
    const masterPort = await freePort();
    const host = initProcessGroup({
      backend: 'tcp',
      rank: 0,
      worldSize: 2,
      masterPort,
      token: 'right',
      timeoutMs: 2000,
    });
    const intruder = await initProcessGroup({
      backend: 'tcp',
      rank: 1,
      worldSize: 2,
      masterPort,
      token: 'wrong',
      timeoutMs: 2000,
    }).catch((e: unknown) => e);
    expect(intruder).toBeInstanceOf(RendezvousError);
    expect((intruder as RendezvousError).code).toBe('E_AUTH');
    expect((intruder as Error).message).toBe(
      `[rendezvous] rank 1: join refused by ws://127.0.0.1:${masterPort}: [hello] rank 1: wrong token`,
    );
    const error = (await host.catch((e: unknown) => e)) as RendezvousError;
    expect(error).toBeInstanceOf(RendezvousError);
    expect(error.message).toBe(
      '[tcp] rank 0: rank 1 never published its address within 2000 ms (did it start, with the same token?)',
    );
    expect(error.missingRanks).toEqual([1]);
  });
});
