import { describe, expect, it } from 'vitest';
import type { DilocoStateDict } from './diloco-types.js';
import {
  decodeJoinState,
  encodeJoinState,
  joinStateBytes,
  roundJoinMomentum,
} from './join-state.js';

// The join format: [Note: a compressed join].

function bits(values: Float32Array): Uint32Array {
  return new Uint32Array(values.buffer, values.byteOffset, values.length);
}

function stateOf(n: number, momentum: boolean): DilocoStateDict {
  const global = Float32Array.from({ length: n }, (_, i) => Math.sin(i * 1.3) * 0.02);
  global[3] = -0;
  bits(global)[5] = 0x7fc01234; // a NaN with a payload
  global[6] = 3e-39; // subnormal
  const momentumBuffer = momentum
    ? Float32Array.from({ length: n }, (_, i) => Math.cos(i * 0.7) * 10 ** ((i % 5) - 4))
    : null;
  return {
    innerStep: 40,
    outerStep: 4,
    global,
    momentumBuffer,
    residual: null,
    shardResidual: null,
  };
}

function sentBytes(entries: ReturnType<typeof encodeJoinState>): number {
  let bytes = 0;
  for (const [name, value] of entries) if (name !== 'join.meta') bytes += value.byteLength;
  return bytes;
}

describe('encodeJoinState / decodeJoinState', () => {
  it('gives the global copy bit for bit and the momentum as every member rounds it (int8, int4, bf16, f32)', () => {
    const n = 1000; // not a multiple of the block: the last block is short
    for (const momentum of ['int8', 'int4', 'bf16', 'f32'] as const) {
      const state = stateOf(n, true);
      const entries = encodeJoinState(state, { momentum, blockSize: 64 });
      expect(sentBytes(entries)).toBe(joinStateBytes(n, { momentum, blockSize: 64 }));
      const got = decodeJoinState(entries);
      expect(got.innerStep).toBe(40);
      expect(got.outerStep).toBe(4);
      expect(got.residual).toBeNull();
      expect(bits(got.global)).toEqual(bits(state.global));
      // Every member rounds its own momentum the same way: the newcomer holds the same bits.
      const rounded = state.momentumBuffer!.slice();
      roundJoinMomentum(rounded, { momentum, blockSize: 64 });
      expect(bits(got.momentumBuffer!)).toEqual(bits(rounded));
      // The documented bound: half a step of the block's scale (bf16: 2^-9 relative, f32: exact).
      const m = state.momentumBuffer!;
      const levels = momentum === 'int8' ? 127 : 7;
      for (let block = 0; block < n; block += 64) {
        const end = Math.min(n, block + 64);
        let max = 0;
        for (let i = block; i < end; i++) max = Math.max(max, Math.abs(m[i]!));
        for (let i = block; i < end; i++) {
          const error = Math.abs(got.momentumBuffer![i]! - m[i]!);
          if (momentum === 'f32') expect(error).toBe(0);
          else if (momentum === 'bf16')
            expect(error).toBeLessThanOrEqual(Math.abs(m[i]!) * 2 ** -8);
          else expect(error).toBeLessThanOrEqual((max / levels / 2) * (1 + 1e-6));
        }
      }
    }
  });

  it('sends no momentum before the first outer step, and says what a join of GPT-2 size costs', () => {
    const entries = encodeJoinState(stateOf(10, false));
    expect([...entries.keys()]).toEqual(['join.meta', 'join.global']);
    expect(decodeJoinState(entries).momentumBuffer).toBeNull();
    // 5.0156 bytes a parameter with int8 momentum in blocks of 256, against 16 for the full f32 state.
    expect(joinStateBytes(256_000)).toBe(256_000 * 4 + 1000 * (1 + 64) * 4);
    expect(joinStateBytes(256_000, { momentum: 'int4' })).toBe(256_000 * 4 + 1000 * (1 + 32) * 4);
  });

  it('refuses a block size that is no multiple of 8', () => {
    expect(() => encodeJoinState(stateOf(10, true), { blockSize: 12 })).toThrow(
      /whole multiple of 8, got 12/,
    );
  });
});
