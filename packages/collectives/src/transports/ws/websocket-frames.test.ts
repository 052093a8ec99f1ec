import { fuzzParameters } from '@webshard/tensor-core/testing';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { frameHead, Opcode, unmask, WebSocketFrameDecoder } from './websocket-frames.js';

/**
 * The WebSocket frame decoder of the Node channels ([Note: reading WebSocket frames ourselves])
 * under fuzzing (seeded, see [Note: seeded fuzzing] in tensor-core's testing entry): messages cut
 * into fragments with any mask, control frames between the fragments, the stream split at any
 * byte and read through scratch or straight into the destination, must come out as the messages
 * that went in; and any bytes at all end in messages or a protocol error, never a throw.
 */

type Event =
  | { kind: 'message'; binary: boolean; bytes: number[] }
  | { kind: 'control'; opcode: number; bytes: number[] }
  | { kind: 'error'; code: number };

/** Records what the decoder reports; with `direct`, long payloads are read into a target view. */
function recorder(direct: boolean) {
  const events: Event[] = [];
  let current: { binary: boolean; length: number | undefined; parts: number[] } | null = null;
  let target: Uint8Array | null = null;
  let filled = 0;
  const decoder = new WebSocketFrameDecoder(
    {
      messageStart(binary, length) {
        current = { binary, length, parts: [] };
        target = direct ? new Uint8Array(1 << 12) : null;
        filled = 0;
      },
      messageBytes(chunk) {
        current!.parts.push(...chunk);
      },
      messageEnd() {
        const message = current!;
        if (message.length !== undefined) expect(message.parts.length).toBe(message.length);
        events.push({ kind: 'message', binary: message.binary, bytes: message.parts });
        current = null;
      },
      control(opcode, payload) {
        events.push({ kind: 'control', opcode, bytes: [...payload] });
      },
      protocolError(code) {
        events.push({ kind: 'error', code });
      },
      directTarget(min) {
        if (target === null || target.byteLength - filled < min) return null;
        return target.subarray(filled);
      },
      directDone(n) {
        current!.parts.push(...target!.subarray(filled, filled + n));
        filled += n;
      },
    },
    true,
  );
  return { decoder, events };
}

/** Feeds `stream` in pieces of the given sizes, as `data` events or through `readBuffer`. */
function feed(decoder: WebSocketFrameDecoder, stream: Uint8Array, cuts: number[], reads: boolean) {
  const scratch = new Uint8Array(64);
  let at = 0;
  let cut = 0;
  while (at < stream.byteLength) {
    const size = Math.max(1, cuts[cut++ % Math.max(1, cuts.length)] ?? 1);
    if (!reads) {
      decoder.push(stream.slice(at, at + size));
      at += size;
      continue;
    }
    const buffer = decoder.readBuffer(scratch, 4);
    const n = Math.min(size, buffer.byteLength, stream.byteLength - at);
    buffer.set(stream.subarray(at, at + n));
    decoder.afterRead(buffer, n);
    at += n;
  }
}

/** RFC 6455 section 5.3, byte by byte: the reference `unmask` must agree with. */
function maskReference(bytes: Uint8Array, mask: ArrayLike<number>, offset: number): Uint8Array {
  const out = new Uint8Array(bytes.byteLength);
  for (let i = 0; i < bytes.byteLength; i++) out[i] = bytes[i]! ^ mask[(offset + i) % 4]!;
  return out;
}

function masked(opcode: number, fin: boolean, payload: Uint8Array, mask: number[]): Uint8Array {
  const head = frameHead(opcode, payload.byteLength, true);
  if (!fin) head[0] = head[0]! & 0x7f;
  head.set(mask, head.byteLength - 4);
  const body = maskReference(payload, mask, 0);
  const frame = new Uint8Array(head.byteLength + body.byteLength);
  frame.set(head);
  frame.set(body, head.byteLength);
  return frame;
}

const maskArbitrary = fc.oneof(
  fc.constant([0, 0, 0, 0] as number[]),
  fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 4, maxLength: 4 }),
);
const messageArbitrary = fc.record({
  binary: fc.boolean(),
  payload: fc.oneof(
    fc.uint8Array({ maxLength: 40 }),
    fc.integer({ min: 100, max: 70_000 }).map((n) => Uint8Array.from({ length: n }, (_, i) => i)),
  ),
  fragments: fc.array(fc.nat(), { maxLength: 3 }),
  ping: fc.option(fc.uint8Array({ maxLength: 125 })),
  mask: maskArbitrary,
});

describe('WebSocket frames under fuzzing', () => {
  for (const reads of [false, true]) {
    it(`gives back every message and control frame, split anywhere (${reads ? 'direct reads' : 'data events'})`, () => {
      fc.assert(
        fc.property(
          fc.array(messageArbitrary, { minLength: 1, maxLength: 5 }),
          fc.array(fc.integer({ min: 1, max: 9000 }), { minLength: 1, maxLength: 8 }),
          (messages, cuts) => {
            const frames: Uint8Array[] = [];
            const expected: Event[] = [];
            for (const message of messages) {
              const { payload, mask } = message;
              const edges = [...new Set(message.fragments.map((f) => f % (payload.length + 1)))];
              edges.sort((a, b) => a - b);
              const pieces: Uint8Array[] = [];
              let from = 0;
              for (const edge of [...edges, payload.length]) {
                if (edge < from) continue;
                pieces.push(payload.subarray(from, edge));
                from = edge;
              }
              pieces.forEach((piece, i) => {
                const opcode =
                  i > 0 ? Opcode.continuation : message.binary ? Opcode.binary : Opcode.text;
                frames.push(masked(opcode, i === pieces.length - 1, piece, mask));
                // A ping between the fragments comes out before the message; after its only
                // frame, after it.
                if (i === 0 && message.ping !== null && pieces.length > 1) {
                  frames.push(masked(Opcode.ping, true, message.ping, mask));
                  expected.push({ kind: 'control', opcode: Opcode.ping, bytes: [...message.ping] });
                }
              });
              expected.push({ kind: 'message', binary: message.binary, bytes: [...payload] });
              if (message.ping !== null && pieces.length === 1) {
                frames.push(masked(Opcode.ping, true, message.ping, mask));
                expected.push({ kind: 'control', opcode: Opcode.ping, bytes: [...message.ping] });
              }
            }
            const stream = new Uint8Array(frames.reduce((n, f) => n + f.byteLength, 0));
            let at = 0;
            for (const frame of frames) {
              stream.set(frame, at);
              at += frame.byteLength;
            }
            const { decoder, events } = recorder(reads);
            feed(decoder, stream, cuts, reads);
            expect(events).toEqual(expected);
          },
        ),
        fuzzParameters(150),
      );
    });
  }

  it('unmasks in place like the byte-by-byte rule, at any alignment, length and phase', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 4, maxLength: 4 }),
        fc.integer({ min: 0, max: 7 }),
        fc.oneof(fc.integer({ min: 0, max: 40 }), fc.integer({ min: 40, max: 5000 })),
        fc.integer({ min: 0, max: 2 ** 31 }),
        fc.integer({ min: 0, max: 2 ** 32 - 1 }),
        (mask, byteOffset, length, offset, seed) => {
          const buffer = new Uint8Array(byteOffset + length + 8);
          for (let i = 0; i < buffer.byteLength; i++) buffer[i] = (seed >>> (i % 24)) + i;
          const before = buffer.slice();
          const view = buffer.subarray(byteOffset, byteOffset + length);
          const expected = maskReference(view, mask, offset);
          unmask(view, mask, offset);
          expect([...view]).toEqual([...expected]);
          // Nothing outside the view moves.
          expect([...buffer.subarray(0, byteOffset)]).toEqual([...before.subarray(0, byteOffset)]);
          expect([...buffer.subarray(byteOffset + length)]).toEqual([
            ...before.subarray(byteOffset + length),
          ]);
        },
      ),
      fuzzParameters(2000),
    );
  });

  it('ends any bytes in messages or a protocol error, never a throw', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.uint8Array({ maxLength: 40 }),
            fc.constantFrom(
              Uint8Array.of(0x82, 0x80 | 127, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0),
              Uint8Array.of(0x80, 0x80, 0, 0, 0, 0),
              Uint8Array.of(0x09, 0x80, 0, 0, 0, 0),
              Uint8Array.of(0x82, 0x05),
              Uint8Array.of(0xc2, 0x80, 0, 0, 0, 0),
            ),
          ),
          { maxLength: 8 },
        ),
        fc.array(fc.integer({ min: 1, max: 50 }), { minLength: 1, maxLength: 4 }),
        fc.boolean(),
        (pieces, cuts, reads) => {
          const stream = new Uint8Array(pieces.reduce((n, p) => n + p.byteLength, 0));
          let at = 0;
          for (const piece of pieces) {
            stream.set(piece, at);
            at += piece.byteLength;
          }
          const { decoder, events } = recorder(reads);
          feed(decoder, stream, cuts, reads);
          const errors = events.filter((e) => e.kind === 'error');
          expect(errors.length).toBeLessThanOrEqual(1);
          if (errors.length === 1) expect(events.at(-1)).toEqual(errors[0]);
          const delivered = events.reduce((n, e) => n + ('bytes' in e ? e.bytes.length : 0), 0);
          expect(delivered).toBeLessThanOrEqual(stream.byteLength);
        },
      ),
      fuzzParameters(3000),
    );
  });

  it('refuses what a server must refuse, with close code 1002 or 1009', () => {
    const cases: [string, Uint8Array, number][] = [
      ['an unmasked frame', Uint8Array.of(0x82, 0x01, 7), 1002],
      ['reserved bits', Uint8Array.of(0xc2, 0x80, 0, 0, 0, 0), 1002],
      ['an unknown opcode', Uint8Array.of(0x83, 0x80, 0, 0, 0, 0), 1002],
      ['a continuation outside a message', Uint8Array.of(0x80, 0x80, 0, 0, 0, 0), 1002],
      ['a fragmented ping', Uint8Array.of(0x09, 0x80, 0, 0, 0, 0), 1002],
      ['a 126-byte ping', Uint8Array.of(0x89, 0x80 | 126, 0, 126, 0, 0, 0, 0), 1002],
      [
        'a length past 2^53',
        Uint8Array.of(0x82, 0xff, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        1009,
      ],
    ];
    for (const [what, bytes, code] of cases) {
      const { decoder, events } = recorder(false);
      decoder.push(bytes.slice());
      expect(events, what).toEqual([{ kind: 'error', code }]);
    }
  });
});

describe('unmask', () => {
  it('XORs byte i with mask[(offset + i) % 4] at every alignment, offset and length', () => {
    const mask = Uint8Array.of(0x12, 0x9a, 0xff, 0x01);
    const backing = new Uint8Array(64).map((_, i) => (i * 37 + 5) & 0xff);
    for (let start = 0; start < 8; start++) {
      for (let length = 0; length <= 23; length++) {
        for (let offset = 0; offset < 8; offset++) {
          const bytes = backing.slice().subarray(start, start + length);
          unmask(bytes, mask, offset);
          const expected = backing
            .subarray(start, start + length)
            .map((b, i) => b ^ mask[(offset + i) % 4]!);
          expect([...bytes], `start ${start} length ${length} offset ${offset}`).toEqual([
            ...expected,
          ]);
        }
      }
    }
  });
});
