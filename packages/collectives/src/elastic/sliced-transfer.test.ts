import { describe, expect, it } from 'vitest';
import { ProcessGroup } from '../process-group.js';
import { LocalHub } from '../transports/local/local-transport.js';
import { receiveStateSlices, StateTransferError, sendStateSlices } from './sliced-transfer.js';
import type { StateValue } from './state-transfer.js';

// The sliced transfer: [Note: a state in slices from several members].

function world(size: number) {
  const hub = new LocalHub(size);
  const groups = hub.transports.map((t) => ProcessGroup.fromTransport(t, { timeoutMs: 10_000 }));
  return { hub, groups };
}

function state(): Map<string, StateValue> {
  const global = Float32Array.from({ length: 1001 }, (_, i) => Math.sin(i) * 1e-3);
  new Uint32Array(global.buffer)[7] = 0x7fc01234; // a NaN with a payload
  return new Map<string, StateValue>([
    ['meta', new TextEncoder().encode('{"outerStep":3}')], // 15 bytes: padded in the stream
    ['global', global],
    ['momentum', Int32Array.from({ length: 257 }, (_, i) => i * 7919 - 1_000_000)],
    ['half', Uint16Array.of(1, 2, 65535)],
    ['empty', new Float32Array(0)],
  ]);
}

function bytesOf(value: StateValue): Buffer {
  return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
}

/** `entries` with every byte outside stream bytes [start, end) spoiled: a sender may send only its slice. */
function spoiledOutside(start: number, end: number): Map<string, StateValue> {
  const copy = new Map<string, StateValue>();
  let at = 0;
  for (const [name, value] of state()) {
    const bytes = new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
    for (let i = 0; i < bytes.length; i++) {
      if (at + i < start || at + i >= end) bytes[i] = 0xa5;
    }
    at += Math.ceil(value.byteLength / 4) * 4;
    copy.set(name, value);
  }
  return copy;
}

describe('sendStateSlices / receiveStateSlices', () => {
  it('three senders each send their slice; the receiver reassembles the state bit for bit', async () => {
    const { groups } = world(4);
    // The stream: 16 + 4004 + 1028 + 8 + 0 bytes = 5056 bytes = 1264 words, 421/421/422 words a slice.
    const cuts = [0, 421 * 4, 842 * 4, 1264 * 4];
    const options = { senders: [0, 1, 2], receivers: [3], chunkBytes: 256 };
    const progress: [number, number][] = [];
    const [received] = await Promise.all([
      receiveStateSlices(groups[3]!, { ...options, onProgress: (r, t) => progress.push([r, t]) }),
      ...[0, 1, 2].map((s) =>
        sendStateSlices(groups[s]!, spoiledOutside(cuts[s]!, cuts[s + 1]!), options),
      ),
    ]);
    const want = state();
    expect([...received.keys()]).toEqual([...want.keys()]);
    for (const [name, value] of want) {
      expect(received.get(name)!.constructor).toBe(value.constructor);
      expect(bytesOf(received.get(name)!)).toEqual(bytesOf(value));
    }
    expect(progress.length).toBe(Math.ceil(421 / 64) * 2 + Math.ceil(422 / 64));
    expect(progress.at(-1)).toEqual([5056, 5056]);
    for (let i = 1; i < progress.length; i++) {
      expect(progress[i]![0]).toBeGreaterThan(progress[i - 1]![0]);
    }
    await Promise.all(groups.map((g) => g.close()));
  });

  it('a sender lost mid-transfer: a StateTransferError with the bytes that arrived, never a partial state', async () => {
    const { hub, groups } = world(3);
    const options = { senders: [0, 1], receivers: [2], chunkBytes: 64 };
    const progress: number[] = [];
    const receiving = receiveStateSlices(groups[2]!, {
      ...options,
      onProgress: (received) => progress.push(received),
    });
    // Sender 0 sends its slice; sender 1 is held, and dies after its first chunks.
    const sending = sendStateSlices(groups[0]!, state(), options).catch((e: unknown) => e);
    void groups[1]!.send(new Int32Array(16).fill(1), 2);
    void groups[1]!.send(new Int32Array(16).fill(2), 2);
    while (progress.length < 5) await new Promise((r) => setTimeout(r, 1));
    hub.kill(1);
    const error = await receiving.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StateTransferError);
    const failed = error as StateTransferError;
    expect(failed.code).toBe('E_TRANSFER');
    expect(failed.totalBytes).toBe(5056);
    // The receiver takes one chunk from each sender in turn: 3 of sender 0's and 2 of sender 1's
    // arrived, then it waited on sender 1's third.
    expect(failed.receivedBytes).toBe(5 * 64);
    expect(progress).toEqual([64, 128, 192, 256, 320]);
    expect(failed.sender).toBe(1);
    expect(failed.message).toMatch(
      /^\[elastic\.transfer\] the state's slice from rank 1 did not arrive \(320 of 5056 bytes received; nothing was kept\)/,
    );
    await sending;
    await Promise.all(groups.map((g) => g.close().catch(() => {})));
  });

  it('refuses a rank that is both sender and receiver', async () => {
    const { groups } = world(2);
    await expect(
      receiveStateSlices(groups[1]!, { senders: [0, 1], receivers: [1] }),
    ).rejects.toThrow(/must be distinct ranks of a group of 2/);
    await Promise.all(groups.map((g) => g.close()));
  });
});
