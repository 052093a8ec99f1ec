import { describe, expect, it } from 'vitest';
import { runTransportSuite } from '../../testing/transport-suite.js';
import { createNetworkWorld, runJobInChildren, runJobInProcess } from '../tcp/network-world.js';
import type { WsTransport } from './ws-transport.js';

// Only rank 0 accepts connections; ranks 1.. behave as browsers do (they dial, and every pair of
// them talks through rank 0's relay).
const onlyRankZeroListens = { listens: (rank: number) => rank === 0 };

runTransportSuite('ws with browser-like ranks relayed through rank 0', {
  sizes: [3, 4],
  failureSizes: [3],
  run(size, job) {
    if (job.kind === 'failure' && job.scenario === 'kill') {
      return runJobInChildren('ws', size, job, true);
    }
    return runJobInProcess('ws', size, job, onlyRankZeroListens);
  },
});

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

  it('refuses a world where no rank accepts connections', async () => {
    const error = await createNetworkWorld('ws', 2, 'relay', { listens: () => false }).catch(
      (e: unknown) => e,
    );
    expect((error as Error).message).toBe(
      '[ws] rank 0: no rank accepts connections (all are browsers?): ranks 0 and 1 cannot be connected',
    );
  });
});
