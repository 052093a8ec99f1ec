import { describe, expect, it } from 'vitest';
import { mulberry32 } from './mulberry32.js';

describe('mulberry32', () => {
  it('matches its reference values', () => {
    // The first outputs of mulberry32(1), from the reference C implementation, times 2^-32.
    const random = mulberry32(1);
    expect([random(), random(), random()].map((v) => Math.round(v * 4294967296))).toEqual([
      2693262067, 11749833, 2265367787,
    ]);
  });

  it('gives the same stream for the same seed, read as a u32', () => {
    const a = mulberry32(-1);
    const b = mulberry32(0xffffffff);
    expect(Array.from({ length: 8 }, a)).toEqual(Array.from({ length: 8 }, b));
  });

  it('stays in [0, 1)', () => {
    const random = mulberry32(42);
    for (let i = 0; i < 10_000; i++) {
      const v = random();
      expect(v >= 0 && v < 1).toBe(true);
    }
  });
});
