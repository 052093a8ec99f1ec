import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../backend/cpu/cpu-backend.js';
import type { DType } from '../dtype.js';
import { fuzzParameters } from '../testing/fuzz.js';
import { Tensor } from '../tensor.js';
import { decodeSafetensors, encodeSafetensors } from './safetensors.js';
import { loadSafetensors } from './safetensors-file.js';
import { SafetensorsError } from './safetensors-format.js';

/**
 * The safetensors reader under random and mutated files (see [Note: seeded fuzzing]): every input
 * ends in the tensors or in a `SafetensorsError`, never another error or a crash, and it never
 * allocates more than the file could justify. Each case runs on a backend whose memory limit is
 * that bound (a few times the file's size, a size class per tensor), so an allocation past it
 * would surface as an `OutOfMemoryError` and fail the property.
 */

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'webshard-safetensors-fuzz-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const source = new CpuBackend();

/** Tensors to start from: names that include reserved words, every dtype, small shapes. */
const tensorsArbitrary = fc.dictionary(
  fc.oneof(fc.string({ maxLength: 6 }), fc.constantFrom('__proto__', 'constructor', 'a.b')),
  fc.record({
    dtype: fc.constantFrom<DType>('f32', 'f16', 'bf16', 'i32', 'f64'),
    shape: fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 3 }),
  }),
  { maxKeys: 4, noNullPrototype: false },
);

async function validFile(spec: Record<string, { dtype: DType; shape: number[] }>) {
  const tensors = Object.create(null) as Record<string, Tensor>;
  for (const [name, { dtype, shape }] of Object.entries(spec)) {
    if (name === '__metadata__') continue;
    tensors[name] = Tensor.empty(source, shape, dtype);
  }
  try {
    return await encodeSafetensors(tensors, { note: 'fuzz' });
  } finally {
    for (const t of Object.values(tensors)) t.free();
  }
}

/** A mutation of a file's bytes: flip, overwrite, truncate, insert, or a new header length. */
const mutationArbitrary = fc.oneof(
  fc.record({
    kind: fc.constant('flip' as const),
    at: fc.nat(),
    bit: fc.integer({ min: 0, max: 7 }),
  }),
  fc.record({
    kind: fc.constant('set' as const),
    at: fc.nat(),
    value: fc.integer({ min: 0, max: 255 }),
  }),
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({
    kind: fc.constant('insert' as const),
    at: fc.nat(),
    bytes: fc.uint8Array({ maxLength: 16 }),
  }),
  fc.record({
    kind: fc.constant('length' as const),
    value: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
  }),
  fc.record({
    kind: fc.constant('text' as const),
    at: fc.nat(),
    text: fc.constantFrom(
      '"',
      '{',
      '}',
      '[',
      ']',
      ',',
      ':',
      '-1',
      '1e309',
      '9007199254740993',
      'null',
      '"__proto__"',
      '"F64"',
      '\u0000',
      '\uD800',
    ),
  }),
);
type Mutation = typeof mutationArbitrary extends fc.Arbitrary<infer M> ? M : never;

function mutate(bytes: Uint8Array, mutations: Mutation[]): Uint8Array {
  let out = bytes.slice();
  for (const m of mutations) {
    const at = out.byteLength === 0 ? 0 : ('at' in m ? m.at : 0) % out.byteLength;
    switch (m.kind) {
      case 'flip':
        if (out.byteLength > 0) out[at] = out[at]! ^ (1 << m.bit);
        break;
      case 'set':
        if (out.byteLength > 0) out[at] = m.value;
        break;
      case 'truncate':
        out = out.slice(0, at);
        break;
      case 'insert':
      case 'text': {
        const piece = m.kind === 'insert' ? m.bytes : new TextEncoder().encode(m.text);
        const next = new Uint8Array(out.byteLength + piece.byteLength);
        next.set(out.subarray(0, at));
        next.set(piece, at);
        next.set(out.subarray(at), at + piece.byteLength);
        out = next;
        break;
      }
      case 'length':
        if (out.byteLength >= 8) new DataView(out.buffer).setBigUint64(0, m.value, true);
        break;
    }
  }
  return out;
}

/** A header of arbitrary JSON values where the fields should be, over a random data buffer. */
const hostileHeaderArbitrary = fc
  .tuple(
    fc.dictionary(
      fc.oneof(fc.string({ maxLength: 4 }), fc.constant('__metadata__'), fc.constant('__proto__')),
      fc.oneof(
        fc.jsonValue({ maxDepth: 2 }),
        fc.record({
          dtype: fc.oneof(
            fc.constantFrom('F32', 'F16', 'BF16', 'I32', 'F64', 'I8', ''),
            fc.jsonValue({ maxDepth: 1 }),
          ),
          shape: fc.oneof(
            fc.array(fc.integer({ min: -2, max: 5 }), { maxLength: 3 }),
            fc.jsonValue({ maxDepth: 1 }),
          ),
          data_offsets: fc.oneof(
            fc.array(fc.integer({ min: -4, max: 64 }), { maxLength: 3 }),
            fc.jsonValue({ maxDepth: 1 }),
          ),
        }),
      ),
      { maxKeys: 4, noNullPrototype: false },
    ),
    fc.integer({ min: 0, max: 96 }),
  )
  .map(([header, dataBytes]) => {
    const text = new TextEncoder().encode(JSON.stringify(header));
    const out = new Uint8Array(8 + text.byteLength + dataBytes);
    new DataView(out.buffer).setBigUint64(0, BigInt(text.byteLength), true);
    out.set(text, 8);
    return out;
  });

/** The memory a file of `bytes` may cost: its data twice over, and a size class per tensor. */
function boundFor(bytes: Uint8Array): number {
  return 2 * bytes.byteLength + 256 * Math.ceil(bytes.byteLength / 16) + 4096;
}

/** Decodes `bytes` on a backend limited to the bound; returns the error, or null after success. */
function decodeChecked(bytes: Uint8Array): unknown {
  const backend = new CpuBackend({ memoryLimit: boundFor(bytes) });
  try {
    const { tensors } = decodeSafetensors(bytes, { backend });
    for (const t of Object.values(tensors)) t.free();
    expect(backend.memoryStats().allocated).toBe(0);
    return null;
  } catch (error) {
    expect(backend.memoryStats().allocated).toBe(0);
    return error;
  }
}

function expectTyped(error: unknown): void {
  if (error === null) return;
  expect(SafetensorsError.isInstance(error), String(error)).toBe(true);
}

describe('the safetensors reader under fuzzing', () => {
  it('random bytes end in a SafetensorsError', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
        expectTyped(decodeChecked(bytes));
      }),
      fuzzParameters(2000),
    );
  });

  it('headers of arbitrary JSON end in the tensors or a SafetensorsError', () => {
    fc.assert(
      fc.property(hostileHeaderArbitrary, (bytes) => {
        expectTyped(decodeChecked(bytes));
      }),
      fuzzParameters(2000),
    );
  });

  it('mutated valid files end in the tensors or a SafetensorsError', async () => {
    await fc.assert(
      fc.asyncProperty(
        tensorsArbitrary,
        fc.array(mutationArbitrary, { maxLength: 4 }),
        async (spec, mutations) => {
          const bytes = await validFile(spec);
          if (mutations.length === 0) {
            // Unmutated: every tensor comes back under its name, whatever the name.
            const { tensors } = decodeSafetensors(bytes, { backend: source });
            const names = Object.keys(spec).filter((name) => name !== '__metadata__');
            expect(Object.keys(tensors).sort()).toEqual(names.sort());
            for (const t of Object.values(tensors)) t.free();
          }
          expectTyped(decodeChecked(mutate(bytes, mutations)));
        },
      ),
      fuzzParameters(1000),
    );
  });

  it('mutated files on disk end in the tensors or a SafetensorsError naming the file', async () => {
    const path = join(dir, 'fuzzed.safetensors');
    await fc.assert(
      fc.asyncProperty(
        tensorsArbitrary,
        fc.array(mutationArbitrary, { minLength: 1, maxLength: 4 }),
        fc.integer({ min: 1, max: 64 }),
        async (spec, mutations, chunkBytes) => {
          const bytes = mutate(await validFile(spec), mutations);
          await writeFile(path, bytes);
          const backend = new CpuBackend({ memoryLimit: boundFor(bytes) });
          const error = await loadSafetensors(path, { backend, chunkBytes }).then(
            ({ tensors }) => {
              for (const t of Object.values(tensors)) t.free();
              return null;
            },
            (e: unknown) => e,
          );
          expectTyped(error);
          if (error !== null) expect((error as SafetensorsError).file).toBe(path);
          expect(backend.memoryStats().allocated).toBe(0);
        },
      ),
      fuzzParameters(150),
    );
  });
});
