import { describe, expect, it } from 'vitest';
import { decodeBytes, encodeBytes } from './byte-huffman.js';
import type { DilocoStateDict } from './diloco-types.js';
import { DilocoArgumentError } from './errors.js';
import { packJoinEntries, unpackJoinEntries } from './join-pack.js';
import { decodeJoinState, encodeJoinState, type JoinEntries } from './join-state.js';
import { newSeed } from './test-support/worlds.js';

// [Note: a join in planes] and [Note: a lossless code for a join's skewed bytes].

/** A seeded generator of uniform numbers in [0, 1) (mulberry32). */
function uniform(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** n values of N(0, std) from `seed`, as a model's weights are drawn. */
function normal(seed: number, n: number, std: number): Float32Array {
  const next = uniform(seed);
  return Float32Array.from({ length: n }, () => {
    const u = next() || 1e-12;
    return std * Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * next());
  });
}

const bitsOf = (values: Float32Array) =>
  new Uint32Array(values.buffer, values.byteOffset, values.length);
/** The first byte where `a` and `b` differ, -1 where none (toEqual is slow on large arrays). */
function firstDifference(a: ArrayBufferView, b: ArrayBufferView): number {
  const x = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  const y = new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  if (x.length !== y.length) return Math.min(x.length, y.length);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return i;
  return -1;
}

const sizeOf = (entries: ReadonlyMap<string, ArrayBufferView>) =>
  [...entries.values()].reduce((sum, value) => sum + value.byteLength, 0);

function stateOf(seed: number, n: number): DilocoStateDict {
  const global = normal(seed, n, 0.02);
  // What a real state holds besides: LayerNorm's ones, zero biases, and the odd values.
  global.fill(1, 0, 64);
  global.fill(0, 64, 128);
  global[200] = -0;
  bitsOf(global)[201] = 0x7fc01234; // a NaN with a payload
  global[202] = 3e-39; // subnormal
  global[203] = Number.POSITIVE_INFINITY;
  return {
    innerStep: 40,
    outerStep: 4,
    global,
    momentumBuffer: normal(seed + 1, n, 0.003),
    residual: null,
    shardResidual: null,
  };
}

describe('a join in planes', () => {
  it('gives back every bit of the global copy and momentum, and moves fewer bytes (random seed)', () => {
    const seed = newSeed('join-pack');
    const n = 200_003;
    const state = stateOf(seed, n);
    const entries = encodeJoinState(state);
    const packed = packJoinEntries(entries);
    const back = unpackJoinEntries(packed);
    expect([...back.keys()].sort()).toEqual([...entries.keys()].sort());
    for (const [name, value] of entries) {
      const got = back.get(name)!;
      expect(got.constructor).toBe(value.constructor);
      expect(firstDifference(got, value)).toBe(-1);
    }
    const loaded = decodeJoinState(back);
    expect(firstDifference(loaded.global, state.global)).toBe(-1);
    // N(0, 0.02) weights: the top bytes take ~3.5 bits of 8, the rest is as it was; the int8
    // momentum shrinks a little (its values crowd near 0): at least 10 % of the bytes saved.
    const ratio = sizeOf(packed) / sizeOf(entries);
    console.log(`join-pack: ${sizeOf(entries)} -> ${sizeOf(packed)} bytes (${ratio.toFixed(3)})`);
    expect(ratio).toBeLessThan(0.9);
    expect(ratio).toBeGreaterThan(0.7);
  });

  it('leaves unpacked entries as they are, and refuses to pack twice', () => {
    const entries = encodeJoinState(stateOf(7, 1000));
    const same = unpackJoinEntries(entries);
    expect(same.get('join.global')).toBe(entries.get('join.global'));
    const packed = packJoinEntries(entries);
    expect(() => packJoinEntries(packed)).toThrow(
      new DilocoArgumentError(
        { op: 'packJoinEntries', rank: -1 },
        'entries',
        'these entries are packed already',
      ),
    );
    const cut: JoinEntries = new Map(packed);
    cut.delete('join.global.low');
    expect(() => unpackJoinEntries(cut)).toThrow(
      /join\.global\.top or join\.global\.low is missing or of the wrong length/,
    );
  });
});

describe('the byte code', () => {
  const roundTrip = (bytes: Uint8Array) => {
    const coded = encodeBytes(bytes);
    expect(firstDifference(decodeBytes(coded), bytes)).toBe(-1);
    expect(firstDifference(encodeBytes(bytes), coded)).toBe(-1);
    return coded;
  };

  it('takes no bytes, one symbol, and bytes it cannot shorten (sent as they are)', () => {
    expect(roundTrip(new Uint8Array(0)).length).toBe(5);
    expect(roundTrip(new Uint8Array(1000).fill(7)).length).toBe(5 + 256 + 125);
    const next = uniform(newSeed('byte-code uniform'));
    const flat = Uint8Array.from({ length: 4096 }, () => Math.floor(next() * 256));
    const coded = roundTrip(flat);
    expect([coded.length, coded[4]]).toEqual([5 + 4096, 0]);
  });

  it('limits its codes to 15 bits where Huffman would make them longer', () => {
    // Fibonacci counts make a code 24 bits deep; the limit must still decode every byte.
    const counts = [1, 1];
    while (counts.length < 25) counts.push(counts.at(-1)! + counts.at(-2)!);
    const bytes = new Uint8Array(counts.reduce((a, b) => a + b, 0));
    let at = 0;
    for (const [s, count] of counts.entries()) {
      bytes.fill(s, at, at + count);
      at += count;
    }
    const coded = roundTrip(bytes);
    expect(Math.max(...coded.subarray(5, 261))).toBeLessThanOrEqual(15);
    expect(coded[4]).toBe(1);
  });

  it('refuses bytes it did not write with a typed error', () => {
    expect(() => decodeBytes(new Uint8Array(3))).toThrow(DilocoArgumentError);
    const coded = encodeBytes(new Uint8Array(100).fill(3));
    coded[4] = 9;
    expect(() => decodeBytes(coded)).toThrow(/unknown mode 9/);
  });
});
