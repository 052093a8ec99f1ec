import { afterEach, describe, expect, it } from 'vitest';
import { type AbortReason, TransportAbortedError } from '../../errors.js';
import { type FakePeerWorld, fakePeerWorld } from '../../test-support/fake-peer.js';
import { encodeFrame, FrameKind, HEADER_BYTES } from './frame.js';
import { ABORT_DRAIN_MS } from './framed-transport.js';

// [Note: draining after an abort]: rank 0 is a real transport, rank 1 the test, which writes the
// frames rank 1 sent before rank 0's abort reached it.

const worlds: FakePeerWorld[] = [];
afterEach(async () => {
  for (const world of worlds.splice(0)) await world.close();
});

const DEADLINE: AbortReason = { kind: 'timeout', origin: 0, message: 'rank 0 gave up', peers: [1] };

describe.each(['tcp', 'ws'] as const)('%s: receives after an abort', (kind) => {
  async function world(): Promise<FakePeerWorld> {
    const made = await fakePeerWorld(kind, 1 << 20);
    worlds.push(made);
    return made;
  }

  /** Writes one frame from rank 1 as its medium carries it (ws: header and payload messages). */
  function frame(to: FakePeerWorld, frameKind: FrameKind, seq: number, payload: Uint8Array): void {
    const bytes = encodeFrame({ kind: frameKind as 1, tag: 5, seq, sender: 1 }, payload);
    if (kind === 'tcp') {
      to.write(bytes);
      return;
    }
    to.write(bytes.subarray(0, HEADER_BYTES));
    to.write(bytes.subarray(HEADER_BYTES));
  }

  it('are served from what the peer sent before the abort reached it, then fail at its abort frame', async () => {
    const fake = await world();
    const { real } = fake;
    const first = new Uint8Array(3);
    const second = new Uint8Array(2);
    // The second receive is posted as the first message lands, after the abort (as a process
    // group posts an op's receives once the fingerprint ahead of them has matched).
    let later: Promise<void> | undefined;
    const received = real.recv(1, 5, first, () => {
      later = real.recv(1, 5, second);
    });
    real.abort(DEADLINE);
    frame(fake, FrameKind.data, 0, new Uint8Array([1, 2, 3]));
    frame(fake, FrameKind.data, 1, new Uint8Array([4, 5]));
    await received;
    await later;
    expect([...first, ...second]).toEqual([1, 2, 3, 4, 5]);
    // Sends fail at once; rank 1's abort frame is the end of what it sent.
    await expect(real.send(1, 5, new Uint8Array(1))).rejects.toThrow(TransportAbortedError);
    const after = real.recv(1, 5, new Uint8Array(1));
    frame(fake, FrameKind.abort, 0, new TextEncoder().encode(JSON.stringify(DEADLINE)));
    await expect(after).rejects.toThrow('[transport] aborted by rank 0 (timeout): rank 0 gave up');
    await expect(real.recv(1, 5, new Uint8Array(1))).rejects.toThrow(TransportAbortedError);
  });

  it(`fail ${ABORT_DRAIN_MS} ms after the abort when the peer sends nothing more`, async () => {
    const { real } = await world();
    const start = performance.now();
    const pending = real.recv(1, 5, new Uint8Array(4)).catch((error: unknown) => error);
    real.abort(DEADLINE);
    const error = (await pending) as TransportAbortedError;
    expect(error).toBeInstanceOf(TransportAbortedError);
    expect(error.reason).toEqual(DEADLINE);
    expect(performance.now() - start).toBeGreaterThanOrEqual(ABORT_DRAIN_MS - 5);
  });

  it('fail at once when the abort names the peer as the one at fault', async () => {
    const { real } = await world();
    const pending = real.recv(1, 5, new Uint8Array(4)).catch((error: unknown) => error);
    const start = performance.now();
    real.abort({ kind: 'peer-lost', origin: 0, peer: 1, message: 'rank 1 is gone' });
    expect(await pending).toBeInstanceOf(TransportAbortedError);
    expect(performance.now() - start).toBeLessThan(ABORT_DRAIN_MS);
  });
});
