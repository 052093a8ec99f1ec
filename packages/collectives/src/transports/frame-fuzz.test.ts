import { fuzzParameters } from '@webshard/tensor-core/testing';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TransportAbortedError } from '../errors.js';
import { fakePeerWorld } from '../test-support/fake-peer.js';
import {
  decodeHello,
  FrameKind,
  HEADER_BYTES,
  MAX_CONTROL_BYTES,
  readHeader,
  writeHeader,
} from './framed/frame.js';

/**
 * The frame readers of the `tcp` and `ws` transports under fuzzing (see [Note: seeded fuzzing] in
 * tensor-core's testing entry): the header parser alone on any bytes, and both transports reading
 * random and mutated frames from a peer that passed the handshake. Every input ends in frames
 * delivered or in a typed abort naming the peer, never a throw into a socket callback (which
 * would crash the process), never a hang, and the receiver never holds more than what the peer
 * sent plus one frame of at most `maxMessageBytes`.
 */

const LIMIT = 4096;
const u32 = fc.integer({ min: 0, max: 2 ** 32 - 1 });

const frameArbitrary = fc.record({
  kind: fc.oneof(fc.constantFrom(1, 2, 3, 4, 5, 6), fc.integer({ min: 0, max: 255 })),
  tag: fc.oneof(fc.constantFrom(0, 1), u32),
  seq: fc.oneof(fc.constantFrom(0, 1, 2), u32),
  length: fc.oneof(
    fc.integer({ min: 0, max: 64 }),
    fc.constantFrom(
      LIMIT,
      LIMIT + 1,
      LIMIT + HEADER_BYTES,
      LIMIT + HEADER_BYTES + 1,
      MAX_CONTROL_BYTES,
      MAX_CONTROL_BYTES + 1,
      2 ** 32,
      2 ** 40,
    ),
    fc.integer({ min: 0, max: 2 ** 53 - 1 }),
  ),
  sender: fc.oneof(fc.constant(1), fc.constantFrom(0, 2), u32),
  stamp: fc.record({
    op: fc.oneof(fc.constantFrom(0, 1, 6, 0x86), fc.integer({ min: 0, max: 255 })),
    seq: fc.oneof(fc.constantFrom(0, 1), u32),
  }),
  payload: fc.uint8Array({ maxLength: 96 }),
  flip: fc.option(fc.record({ at: fc.integer({ min: 0, max: HEADER_BYTES - 1 }), bit: fc.nat(7) })),
});
type FuzzFrame = typeof frameArbitrary extends fc.Arbitrary<infer F> ? F : never;

/** A header with every field as generated (any kind byte, any length), then a bit flipped. */
function headerBytes(frame: FuzzFrame): Uint8Array {
  const bytes = new Uint8Array(HEADER_BYTES);
  writeHeader(bytes, { ...frame, kind: frame.kind as FrameKind });
  if (frame.flip !== null) bytes[frame.flip.at] = bytes[frame.flip.at]! ^ (1 << frame.flip.bit);
  return bytes;
}

/** What the peer sends: frames (header, then payload), raw bytes, or (ws) a text message. */
const pieceArbitrary = fc.oneof(
  { weight: 4, arbitrary: frameArbitrary.map((frame) => ({ frame }) as const) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 80 }).map((raw) => ({ raw }) as const) },
  { weight: 1, arbitrary: fc.string({ maxLength: 8 }).map((text) => ({ text }) as const) },
);
type Piece = typeof pieceArbitrary extends fc.Arbitrary<infer P> ? P : never;

/** Receives rank 0 posts before the peer writes, so frames can land straight in them. */
const postsArbitrary = fc.array(
  fc.record({ tag: fc.constantFrom(0, 1), size: fc.integer({ min: 0, max: 64 }) }),
  { maxLength: 3 },
);

/** The largest length a frame of `kind` may announce ([Note: network frames]). */
function capFor(kind: number, limit: number): number {
  if (kind === FrameKind.data) return limit;
  if (kind === FrameKind.relay || kind === FrameKind.relayed) return limit + HEADER_BYTES;
  return MAX_CONTROL_BYTES;
}

function settleWithin<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`hang: ${what} did not settle in ${ms} ms`)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

describe('frame headers under fuzzing', () => {
  it('readHeader returns a reason or a header within its limits, for any bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 72 }), fc.nat(40), u32, (bytes, offset, limit) => {
        const header = readHeader(bytes, limit, offset);
        if (typeof header === 'string') return;
        expect(header.kind).toBeGreaterThanOrEqual(FrameKind.data);
        expect(header.kind).toBeLessThanOrEqual(FrameKind.relayed);
        expect(header.length).toBeLessThanOrEqual(capFor(header.kind, limit));
      }),
      fuzzParameters(5000),
    );
  });

  it('readHeader accepts exactly the well-formed headers within the limit, bit for bit', () => {
    fc.assert(
      fc.property(frameArbitrary, (frame) => {
        const header = readHeader(headerBytes(frame), LIMIT);
        const known = frame.kind >= FrameKind.data && frame.kind <= FrameKind.relayed;
        const { op, seq } = frame.stamp;
        // An op stamp names a known kind, and only data frames carry one ([Note: op stamps]).
        const stampOk = (op & 0x7f) <= 6 && (frame.kind === FrameKind.data || op + seq === 0);
        const wellFormed =
          frame.flip === null && known && stampOk && frame.length <= capFor(frame.kind, LIMIT);
        expect(typeof header !== 'string', String(header)).toBe(wellFormed);
        if (typeof header === 'string') return;
        const { payload: _payload, flip: _flip, ...fields } = frame;
        expect(header).toEqual(fields);
      }),
      fuzzParameters(5000),
    );
  });

  it('decodeHello never throws, whatever the payload', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
        const hello = decodeHello(bytes);
        if (typeof hello !== 'string') expect(hello.token.byteLength).toBe(bytes.byteLength - 8);
      }),
      fuzzParameters(2000),
    );
  });
});

describe.each(['tcp', 'ws'] as const)('the %s frame reader under fuzzing', (kind) => {
  it('ends every stream from an authenticated peer in frames or a typed abort naming it', async () => {
    await fc.assert(
      fc.asyncProperty(
        postsArbitrary,
        fc.array(pieceArbitrary, { minLength: 1, maxLength: 6 }),
        async (posts, pieces: Piece[]) => {
          const world = await fakePeerWorld(kind, LIMIT);
          try {
            const receives = posts.map(({ tag, size }) =>
              world.real.recv(1, tag, new Uint8Array(size)).then(
                () => null,
                (e: unknown) => e,
              ),
            );
            let sent = 0;
            for (const piece of pieces) {
              if ('frame' in piece) {
                const header = headerBytes(piece.frame);
                const { payload } = piece.frame;
                sent += header.byteLength + payload.byteLength;
                if (kind === 'tcp') world.write(Buffer.concat([header, payload]));
                else {
                  world.write(header);
                  if (payload.byteLength > 0) world.write(payload);
                }
              } else if ('raw' in piece) {
                sent += piece.raw.byteLength;
                world.write(piece.raw);
              } else if (kind === 'ws') {
                sent += piece.text.length;
                world.write(piece.text);
              }
            }
            world.end();
            // Whatever came before, a receive from the peer now fails, naming it.
            const last = world.real.recv(1, 7, new Uint8Array(1)).then(
              () => null,
              (e: unknown) => e,
            );
            const error = await settleWithin(last, 5000, 'a receive from the gone peer');
            expect(error).toBeInstanceOf(TransportAbortedError);
            const { reason } = error as TransportAbortedError;
            expect(reason.peer === 1 || reason.origin === 1, JSON.stringify(reason)).toBe(true);
            for (const outcome of await Promise.all(receives)) {
              if (outcome !== null) expect(outcome).toBeInstanceOf(TransportAbortedError);
            }
            const { unexpectedBytes } = world.real as { unexpectedBytes?: number };
            expect(unexpectedBytes ?? 0).toBeLessThanOrEqual(sent + LIMIT);
          } finally {
            await world.close();
          }
        },
      ),
      fuzzParameters(60),
    );
  }, 120_000);
});
