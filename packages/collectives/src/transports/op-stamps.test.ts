import { afterEach, describe, expect, it, vi } from 'vitest';
import { CollectiveMismatchError } from '../errors.js';
import { type OpStamp, opStamp } from '../op-stamp.js';
import { ProcessGroup } from '../process-group.js';
import { fakePeerWorld } from '../test-support/fake-peer.js';
import { createNetworkWorld } from '../test-support/network-world.js';
import { FrameKind, HEADER_BYTES, writeHeader } from './framed/frame.js';
import { LocalHub } from './local/local-transport.js';
import { createShmHandle } from './shm/shm-layout.js';
import { ShmTransport } from './shm/shm-transport.js';

/**
 * [Note: op stamps] on every transport: group rank 0 runs a real all-gather of 2 + 2 f32 on a
 * group of two, and its peer is the test, which sends the op's real fingerprint and then one
 * message of another op (another seq, kind, byte count or sender) where the op's data is
 * expected. The receive it meets must fail the op with the mismatch naming both ops, and never
 * take the bytes. Over `ws` also between two browser-like ranks, through rank 0's relay.
 */

/** The forged sender of shm's next ring header (shm writes its own rank; nothing else can). */
const forged = vi.hoisted(() => ({ sender: null as number | null }));
vi.mock('./shm/ring-header.js', async (original) => {
  const actual = await original<typeof import('./shm/ring-header.js')>();
  return {
    ...actual,
    writeRingHeader(view: DataView, tag: number, length: number, sender: number, stamp: OpStamp) {
      actual.writeRingHeader(view, tag, length, forged.sender ?? sender, stamp);
    },
  };
});

/** One message from rank 1 as the test forges it. */
interface Forged {
  readonly stamp: OpStamp;
  readonly bytes: Uint8Array;
  readonly sender: number;
}

/** The test's peer's messages to the receiving rank over one transport, in order, on `tag`. */
interface Wire {
  /** The receiving rank's group of two, with the test's peer as group rank 1. */
  readonly group: ProcessGroup;
  /** The peer's transport rank. */
  readonly peer: number;
  send(tag: number, messages: readonly Forged[]): Promise<void>;
  close(): Promise<void>;
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  forged.sender = null;
});

const FINGERPRINT_MAGIC = 0x57534643;
/** Rank 0's call: `allGather(f32 x 2 -> f32 x 4)`, op 0 of its group (fingerprint.ts's layout). */
const FINGERPRINT = new Uint8Array(Int32Array.from([FINGERPRINT_MAGIC, 2, 0, 1, 4, 0]).buffer);

async function localWire(): Promise<Wire> {
  const hub = new LocalHub(2);
  const [rank0] = hub.transports;
  return {
    group: ProcessGroup.fromTransport(rank0!).newGroup([0, 1])!,
    peer: 1,
    async send(tag, messages) {
      for (const { stamp, bytes, sender } of messages)
        rank0!.mailbox.deliver(1, tag, bytes, stamp, sender);
    },
    close: () => rank0!.close(),
  };
}

async function framedWire(kind: 'tcp' | 'ws'): Promise<Wire> {
  const world = await fakePeerWorld(kind, 1 << 20);
  const frameSeq = new Map<number, number>();
  return {
    group: ProcessGroup.fromTransport(world.real).newGroup([0, 1])!,
    peer: 1,
    async send(tag, messages) {
      for (const { stamp, bytes, sender } of messages) {
        const seq = frameSeq.get(tag) ?? 0;
        frameSeq.set(tag, seq + 1);
        const header = new Uint8Array(HEADER_BYTES);
        writeHeader(header, {
          kind: FrameKind.data,
          tag,
          seq,
          length: bytes.byteLength,
          sender,
          stamp,
        });
        world.write(header);
        world.write(bytes);
      }
    },
    close: () => world.close(),
  };
}

async function shmWire(): Promise<Wire> {
  const handle = createShmHandle(2);
  const [rank0, rank1] = [new ShmTransport(handle, 0), new ShmTransport(handle, 1)];
  return {
    // A sub-group: the world group runs its collectives in the arena, not through the rings.
    group: ProcessGroup.fromTransport(rank0).newGroup([0, 1])!,
    peer: 1,
    async send(tag, messages) {
      for (const { stamp, bytes, sender } of messages) {
        forged.sender = sender;
        const sent = rank1.send(0, tag, bytes, stamp);
        forged.sender = null;
        await sent;
      }
    },
    async close() {
      await rank1.close();
      await rank0.close();
    },
  };
}

/** Ranks 1 and 2 dial only, as browser tabs do, and reach each other through rank 0's relay. */
async function relayWire(): Promise<Wire> {
  const world = await createNetworkWorld('ws', 3, 'relay', { listens: (rank) => rank === 0 });
  const [, rank1, rank2] = world.transports;
  return {
    group: ProcessGroup.fromTransport(rank1!).newGroup([1, 2])!,
    peer: 2,
    async send(tag, messages) {
      for (const { stamp, bytes } of messages) await rank2!.send(1, tag, bytes, stamp);
    },
    close: () => world.close(),
  };
}

const wires: Record<string, () => Promise<Wire>> = {
  local: localWire,
  tcp: () => framedWire('tcp'),
  ws: () => framedWire('ws'),
  'ws between browser-like ranks, relayed': relayWire,
  shm: shmWire,
};

const allGather = opStamp('allGather', 0);
const data = (bytes: number) => new Uint8Array(bytes).fill(7);

/** The messages of another op from peer `p`, and the error's detail. */
function wrong(p: number): [string, Forged, string][] {
  const expected = (bytes: number) => `allGather seq 0 (${bytes} bytes) was expected`;
  return [
    [
      'a wrong seq',
      { stamp: opStamp('allGather', 1), bytes: data(8), sender: p },
      `received rank ${p}'s allGather seq 1 (8 bytes) where ${expected(8)}`,
    ],
    [
      'a wrong kind',
      { stamp: opStamp('allReduce', 0), bytes: data(8), sender: p },
      `received rank ${p}'s allReduce seq 0 (8 bytes) where ${expected(8)}`,
    ],
    [
      'a wrong byte count',
      { stamp: allGather, bytes: data(4096), sender: p },
      `received rank ${p}'s allGather seq 0 (4096 bytes) where ${expected(8)}`,
    ],
    [
      'a wrong sender',
      { stamp: allGather, bytes: data(8), sender: 0 },
      `received rank 0's allGather seq 0 (8 bytes) where rank ${p}'s ${expected(8)}`,
    ],
    [
      'another op altogether',
      { stamp: opStamp('allReduce', 1), bytes: data(4096), sender: p },
      `received rank ${p}'s allReduce seq 1 (4096 bytes) where ${expected(8)}`,
    ],
  ];
}

describe.each(Object.keys(wires))('op stamps over %s', (transport) => {
  // Through the relay the sender is a real transport, which writes its own rank.
  const relayed = transport.includes('relayed');
  const cases = relayed ? wrong(2).filter(([what]) => what !== 'a wrong sender') : wrong(1);
  it.each(cases)(
    "fails the op with a mismatch on %s, and never fills the receive's buffer",
    async (_what, message, detail) => {
      const wire = await wires[transport]!();
      cleanups.push(() => wire.close());
      const { group, peer } = wire;
      const output = new Float32Array(4).fill(-1);
      const work = group.allGather(Float32Array.from([1, 2]), output);
      const fingerprint = {
        stamp: opStamp('allGather', 0, true),
        bytes: FINGERPRINT,
        sender: peer,
      };
      await wire.send(group.tag, [fingerprint, message]);
      const error = await work.wait().then(
        () => null,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(CollectiveMismatchError);
      // `errorFromAbortReason` compares the reason's origin, a world rank, with the group rank:
      // a receiver whose two differ (the relayed pair's rank 1) reads its own report as a peer's.
      const origin = group.ranks[0]!;
      const from = origin === 0 ? '' : ` (reported by rank ${origin})`;
      expect((error as Error).message).toBe(`[allGather] rank 0 (seq 0): ${detail}${from}`);
      expect((error as CollectiveMismatchError).reason).toMatchObject({
        kind: 'mismatch',
        origin: group.ranks[0],
        peer,
        seq: 0,
        tag: group.tag,
      });
      expect([...output.subarray(2)]).toEqual([-1, -1]);
      expect(group.state).toBe('aborted');
    },
  );

  it('takes the messages of the op it runs', async () => {
    const wire = await wires[transport]!();
    cleanups.push(() => wire.close());
    const { group, peer: sender } = wire;
    const output = new Float32Array(4).fill(-1);
    const work = group.allGather(Float32Array.from([1, 2]), output);
    const fingerprint = { stamp: opStamp('allGather', 0, true), bytes: FINGERPRINT, sender };
    const shard = new Uint8Array(Float32Array.from([3, 4]).buffer);
    await wire.send(group.tag, [fingerprint, { stamp: allGather, bytes: shard, sender }]);
    await work.wait();
    expect([...output]).toEqual([1, 2, 3, 4]);
  });
});
