import { describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { ProcessGroup } from '../../process-group.js';
import { StoreClient } from '../../rendezvous/store-client.js';
import { StoreServer } from '../../rendezvous/store-server.js';
import { shardRange } from '../../shard.js';
import { killsARank, SUITE_GROUP_OPTIONS } from '../../suites/suite.js';
import { runTransportSuite } from '../../suites/transport-suite.js';
import {
  createNetworkWorld,
  runJobInChildren,
  runJobInProcess,
} from '../../test-support/network-world.js';
import { nativeChannels } from './channel.js';
import { WsTransport } from './ws-transport.js';

// Only rank 0 accepts connections; ranks 1.. behave as browsers do (they dial, and every pair of
// them talks through rank 0's relay).
const onlyRankZeroListens = { listens: (rank: number) => rank === 0 };

runTransportSuite('ws with browser-like ranks relayed through rank 0', {
  sizes: [3, 4],
  failureSizes: [3],
  run(size, job) {
    if (killsARank(job)) return runJobInChildren('ws', size, job, true);
    return runJobInProcess('ws', size, job, onlyRankZeroListens);
  },
});

/** A store server for 3 ranks and each rank's client, joined with `token`. */
async function threeStores(token: string): Promise<{ server: StoreServer; stores: StoreClient[] }> {
  const server = new StoreServer({ port: 0, worldSize: 3, token });
  const port = await server.listen();
  const stores = await Promise.all(
    [0, 1, 2].map((rank) =>
      StoreClient.connect({ url: `ws://127.0.0.1:${port}`, rank, worldSize: 3, token }),
    ),
  );
  return { server, stores };
}

describe('ws relay', () => {
  it('delivers a relayed message into the receive buffer, byte for byte', async () => {
    const world = await createNetworkWorld('ws', 3, 'relay', onlyRankZeroListens);
    try {
      const [, t1, t2] = world.transports as WsTransport[];
      const data = Uint8Array.from({ length: 70_001 }, (_, i) => (i * 31) & 255);
      const dst = new Uint8Array(70_001);
      const empty = new Uint8Array(0);
      await Promise.all([
        t1!.send(2, 5, data),
        t2!.recv(1, 5, dst),
        t2!.send(1, 6, empty),
        t1!.recv(2, 6, empty),
      ]);
      expect(dst).toEqual(data);
    } finally {
      await world.close();
    }
  });

  it('holds frames for a rank that has not connected to the relay yet, then delivers them', async () => {
    // Rank 2 counts rank 1 as open as soon as its own link to the relay is; what it sends before
    // rank 1 connects must wait at the relay, not abort the group (a race CI hit once).
    const { server, stores } = await threeStores('late');
    // Rank 1 dials the relay only when the gate opens.
    let open: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    const browser = nativeChannels(WebSocket as unknown as Parameters<typeof nativeChannels>[0]);
    const late = { dial: async (url: string) => gate.then(() => browser.dial(url)) };
    const t0 = WsTransport.create({ store: stores[0]!, token: 'late' });
    const t1 = WsTransport.create({
      store: stores[1]!,
      token: 'late',
      listen: false,
      channels: late,
    });
    const t2 = await WsTransport.create({ store: stores[2]!, token: 'late', listen: false });
    const data = Uint8Array.from({ length: 4099 }, (_, i) => (i * 7) & 255);
    await t2.send(1, 3, data);
    await new Promise((resolve) => setTimeout(resolve, 100));
    open();
    const transports = [await t0, await t1, t2];
    try {
      const dst = new Uint8Array(data.byteLength);
      await transports[1]!.recv(2, 3, dst);
      expect(dst).toEqual(data);
      // And the other way, now that both are connected.
      await Promise.all([
        transports[1]!.send(2, 4, data.subarray(0, 5)),
        t2.recv(1, 4, dst.subarray(0, 5)),
      ]);
    } finally {
      await Promise.all(transports.map((t) => t.close()));
      await Promise.all(stores.map((s) => s.close()));
      await server.close();
    }
  });

  it('refuses a world where no rank accepts connections', async () => {
    const error = await createNetworkWorld('ws', 2, 'relay', { listens: () => false }).catch(
      (e: unknown) => e,
    );
    expect((error as Error).message).toBe(
      '[ws] rank 0: no rank accepts connections (all are browsers?): ranks 0 and 1 cannot be connected',
    );
  });
});

describe('ws ranks on the browser code path', () => {
  it('runs collectives with ranks 1 and 2 on nativeChannels (browser WebSocket API), relayed', async () => {
    const { server, stores } = await threeStores('b');
    // `ws` stands in for the browser's WebSocket: only its standard API is used (onopen,
    // onmessage with ArrayBuffer data, send, close).
    const browser = nativeChannels(WebSocket as unknown as Parameters<typeof nativeChannels>[0]);
    const transports = await Promise.all(
      stores.map((store) =>
        WsTransport.create(
          store.rank === 0
            ? { store, token: 'b' }
            : { store, token: 'b', listen: false, channels: browser },
        ),
      ),
    );
    try {
      const groups = transports.map((t) => ProcessGroup.fromTransport(t, SUITE_GROUP_OPTIONS));
      const data = groups.map((g) => {
        const shared = new Float32Array(new SharedArrayBuffer(4 * 3000));
        for (let i = 0; i < 3000; i++) shared[i] = (g.rank + 1) * i;
        return shared;
      });
      await Promise.all(groups.map((g, r) => g.allReduce(data[r]!).wait()));
      for (const d of data) {
        expect(d[0]).toBe(0);
        expect(d[1]).toBe(6);
        expect(d[2999]).toBe(6 * 2999);
      }
      const gathered = groups.map(() => new Int32Array(7));
      await Promise.all(
        groups.map((g, r) => {
          const shard = shardRange(7, 3, r);
          const input = Int32Array.from({ length: shard.count }, (_, i) => 100 * r + i);
          return g.allGather(input, gathered[r]!).wait();
        }),
      );
      for (const out of gathered) expect(Array.from(out)).toEqual([0, 1, 2, 100, 101, 102, 200]);
    } finally {
      await Promise.all(transports.map((t) => t.close()));
      await Promise.all(stores.map((s) => s.close()));
      await server.close();
    }
  });
});
