import { fuzzParameters } from '@webshard/tensor-core/testing';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { MAX_KEY_LENGTH, parseRequest, parseResponse } from './protocol.js';
import { StoreClient } from './store-client.js';
import { StoreServer } from './store-server.js';

/**
 * The rendezvous store's message parser under fuzzing (see [Note: seeded fuzzing] in tensor-core's
 * testing entry): on any text it returns a reason or a request whose fields are what the server
 * relies on, never throws; a live store fed random requests by a joined client answers each or
 * closes that client, and keeps serving the others.
 */

const OPS = ['hello', 'set', 'get', 'check', 'add', 'wait', 'compareSet', 'delete', 'bye'];

/** Requests shaped like the real ones, with any field replaced by any JSON value. */
const requestArbitrary = fc
  .record(
    {
      id: fc.oneof(fc.nat(), fc.jsonValue({ maxDepth: 1 })),
      op: fc.oneof(fc.constantFrom(...OPS), fc.jsonValue({ maxDepth: 1 })),
      key: fc.oneof(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 1 })),
      keys: fc.oneof(fc.array(fc.string({ maxLength: 4 }), { maxLength: 3 }), fc.jsonValue()),
      value: fc.oneof(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 1 })),
      delta: fc.oneof(fc.integer(), fc.double(), fc.jsonValue({ maxDepth: 1 })),
      timeoutMs: fc.oneof(fc.integer({ min: -5, max: 50 }), fc.double(), fc.jsonValue()),
      expected: fc.oneof(fc.string({ maxLength: 4 }), fc.jsonValue({ maxDepth: 1 })),
      desired: fc.oneof(fc.string({ maxLength: 4 }), fc.jsonValue({ maxDepth: 1 })),
    },
    { requiredKeys: ['id', 'op'] },
  )
  .map((request) => JSON.stringify(request));

const textArbitrary = fc.oneof(
  requestArbitrary,
  fc.json(),
  fc.string({ maxLength: 40 }),
  fc.constantFrom(
    '{"__proto__":{"op":"set"},"id":1}',
    '{"id":1,"op":"get","key":"k","timeoutMs":1e400}',
  ),
);

function isKey(value: unknown): boolean {
  return typeof value === 'string' && value.length > 0 && value.length <= MAX_KEY_LENGTH;
}

describe('the store protocol under fuzzing', () => {
  it('parseRequest returns a reason or a request the server can trust, for any text', () => {
    fc.assert(
      fc.property(textArbitrary, (text) => {
        const request = parseRequest(text);
        if (typeof request === 'string') return;
        expect(Number.isSafeInteger(request.id)).toBe(true);
        expect(OPS).toContain(request.op);
        // The fields the server reads for this op (extra fields are ignored).
        switch (request.op) {
          case 'hello':
            expect(typeof request.token).toBe('string');
            expect(Number.isSafeInteger(request.rank)).toBe(true);
            expect(Number.isSafeInteger(request.worldSize)).toBe(true);
            break;
          case 'set':
            expect(isKey(request.key) && typeof request.value === 'string').toBe(true);
            break;
          case 'get':
          case 'wait': {
            const keys = request.op === 'get' ? [request.key] : request.keys;
            expect(keys.every(isKey)).toBe(true);
            expect(request.timeoutMs >= 0 && request.timeoutMs <= 2 ** 31).toBe(true);
            break;
          }
          case 'check':
            expect(request.keys.every(isKey)).toBe(true);
            break;
          case 'add':
            expect(isKey(request.key) && Number.isSafeInteger(request.delta)).toBe(true);
            break;
          case 'compareSet':
            expect(isKey(request.key)).toBe(true);
            expect(
              typeof request.expected === 'string' && typeof request.desired === 'string',
            ).toBe(true);
            break;
          case 'delete':
            expect(isKey(request.key)).toBe(true);
            break;
          case 'bye':
            break;
        }
      }),
      fuzzParameters(5000),
    );
  });

  it('parseResponse never throws', () => {
    fc.assert(
      fc.property(textArbitrary, (text) => {
        parseResponse(text);
      }),
      fuzzParameters(2000),
    );
  });
});

describe('a live store under fuzzing', () => {
  const token = 'fuzz-store';
  let server: StoreServer;
  let url: string;
  let rank0: StoreClient;
  beforeAll(async () => {
    server = new StoreServer({ port: 0, worldSize: 2, token });
    url = `ws://127.0.0.1:${await server.listen()}`;
    rank0 = await StoreClient.connect({ url, rank: 0, worldSize: 2, token });
  });
  afterAll(async () => {
    await rank0.close();
    await server.close();
  });

  it('answers or closes a joined client sending random requests, and keeps serving', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(textArbitrary, { minLength: 1, maxLength: 8 }), async (texts) => {
        const socket = new WebSocket(url);
        socket.on('error', () => {});
        const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
        await new Promise((resolve) => socket.once('open', resolve));
        const joined = new Promise((resolve) => socket.once('message', resolve));
        socket.send(JSON.stringify({ id: 0, op: 'hello', token, rank: 1, worldSize: 2 }));
        await joined;
        for (const text of texts) socket.send(text);
        socket.send(JSON.stringify({ id: 1e6, op: 'bye' }));
        // A `get` or `wait` of up to 50 ms may be pending; the store must end the connection.
        let timer: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([
          closed,
          new Promise((_, reject) => {
            timer = setTimeout(() => reject(new Error('hang: the store kept the client')), 5000);
          }),
        ]).finally(() => clearTimeout(timer));
        await rank0.set('alive', String(texts.length));
        expect(await rank0.get('alive')).toBe(String(texts.length));
        // Rank 1 may join again: the store forgot the fuzzing connection.
        for (let i = 0; i < 100 && server.joinedRanks().includes(1); i++) {
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
        expect(server.joinedRanks()).toEqual([0]);
      }),
      fuzzParameters(100),
    );
  }, 60_000);
});
