import { afterEach, describe, expect, it } from 'vitest';
import { type AbortReason, TransportAbortedError } from '../../errors.js';
import { createNetworkWorld, type NetworkWorld } from '../../test-support/network-world.js';
import type { Channel } from './channel.js';
import type { WsTransport } from './ws-transport.js';

/**
 * [Note: blaming a rank that left]: a rank that aborted over a third rank's failure and left at
 * once is not blamed in its place, even when its abort frames never reached a peer (they lost the
 * race with its closing connection, #20 item 4).
 */

const worlds: NetworkWorld[] = [];
afterEach(async () => {
  for (const world of worlds.splice(0)) await world.close();
});

/** The channels of a ws transport, by peer rank (white-box: the test breaks one link). */
function channelsOf(transport: WsTransport): (Channel | null)[] {
  const peers = (transport as unknown as { peers: ({ channel: Channel | null } | null)[] }).peers;
  return peers.map((peer) => peer?.channel ?? null);
}

describe('ws: blaming a rank that left', () => {
  it('takes the reason a leaving rank published, not "it is gone", when its frames were lost', async () => {
    const world = await createNetworkWorld('ws', 4);
    worlds.push(world);
    const [, t1, t2] = world.transports as WsTransport[];
    // Rank 2's frames to rank 1 are lost (the send completes, nothing goes out).
    const link = channelsOf(t2!)[1]!;
    link.send = (_bytes, done) => done?.();
    const pending = t1!.recv(2, 0, new Uint8Array(4)).then(
      () => null,
      (e: unknown) => e,
    );
    const reason: AbortReason = {
      kind: 'peer-lost',
      origin: 2,
      peer: 3,
      message: 'rank 3 is gone: its WebSocket closed (1006) (seen by rank 2 over ws)',
    };
    t2!.abort(reason);
    await t2!.close();
    const error = await pending;
    expect(error).toBeInstanceOf(TransportAbortedError);
    expect((error as TransportAbortedError).reason).toEqual(reason);
    // A send or receive naming the rank that left, made after, fails the same way.
    await expect(t1!.send(2, 0, new Uint8Array(1))).rejects.toThrow(reason.message);
  });

  it('still blames a rank that left without publishing anything', async () => {
    const world = await createNetworkWorld('ws', 3);
    worlds.push(world);
    const [, t1, t2] = world.transports as WsTransport[];
    const pending = t1!.recv(2, 0, new Uint8Array(4)).then(
      () => null,
      (e: unknown) => e,
    );
    for (const channel of channelsOf(t2!)) channel?.destroy();
    const error = (await pending) as TransportAbortedError;
    expect(error).toBeInstanceOf(TransportAbortedError);
    expect(error.reason).toMatchObject({ kind: 'peer-lost', origin: 1, peer: 2 });
  });
});
