import { describe, expect, it } from 'vitest';
import { ArgumentError } from '../errors.js';
import { RandomGenerator } from './generator.js';
import { mulHi32, philox4x32, philoxNormal, philoxUniform, splitU64 } from './philox.js';

function run(ctr: number[], key: number[]): number[] {
  return [...philox4x32(ctr[0]!, ctr[1]!, ctr[2]!, ctr[3]!, key[0]!, key[1]!, new Uint32Array(4))];
}

describe('philox4x32-10', () => {
  it('matches the Random123 known-answer vectors', () => {
    expect(run([0, 0, 0, 0], [0, 0])).toEqual([0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
    const ones = 0xffffffff;
    expect(run([ones, ones, ones, ones], [ones, ones])).toEqual([
      0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd,
    ]);
    expect(run([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0])).toEqual(
      [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
    );
  });

  it('computes the exact high word of a 32x32 product', () => {
    const pairs = [
      [0xffffffff, 0xffffffff],
      [0xd2511f53, 0x12345678],
      [0xcd9e8d57, 0x80000000],
      [1, 0xffffffff],
      [0, 0xdeadbeef],
    ];
    for (const [a, b] of pairs) {
      const expected = Number((BigInt(a!) * BigInt(b!)) >> 32n);
      expect(mulHi32(a!, b!)).toBe(expected);
    }
  });

  it('splits counters above 2^32 into lo and hi words', () => {
    expect(splitU64(2 ** 32 + 5)).toEqual([5, 1]);
    expect(splitU64(2 ** 53 - 1)).toEqual([0xffffffff, 0x1fffff]);
  });
});

describe('philoxUniform / philoxNormal', () => {
  it('derive element i from counter offset + i only', () => {
    const whole = new Float64Array(40);
    philoxUniform(whole, 7, 100);
    const tail = new Float64Array(15);
    philoxUniform(tail, 7, 125);
    expect([...tail]).toEqual([...whole.subarray(25)]);
    const words = philox4x32(100, 0, 0, 0, 7, 0, new Uint32Array(4));
    expect(whole[0]).toBe((words[0]! >>> 8) / 2 ** 24);
  });

  it('uses the seed high word as the second key word', () => {
    const a = new Float64Array(4);
    const b = new Float64Array(4);
    philoxUniform(a, 3, 0);
    philoxUniform(b, 3 + 2 ** 32, 0);
    expect([...a]).not.toEqual([...b]);
    const words = philox4x32(0, 0, 0, 0, 3, 1, new Uint32Array(4));
    expect(b[0]).toBe((words[0]! >>> 8) / 2 ** 24);
  });

  it('scales in f32 with a rounding after the multiply and after the add', () => {
    const f32 = new Float64Array(50);
    const f64 = new Float64Array(50);
    philoxUniform(f32, 2, 0, -0.3, 0.7);
    philoxUniform(f64, 2, 0, -0.3, 0.7, 'f64');
    const words = new Uint32Array(4);
    let differ = 0;
    for (let i = 0; i < 50; i++) {
      philox4x32(i, 0, 0, 0, 2, 0, words);
      const u = (words[0]! >>> 8) / 2 ** 24;
      expect(f32[i]).toBe(Math.fround(Math.fround(-0.3) + Math.fround(Math.fround(1) * u)));
      expect(f64[i]).toBe(-0.3 + 1 * u);
      if (f32[i] !== f64[i]) differ++;
    }
    expect(differ).toBeGreaterThan(0);
  });

  it('scales uniform values into [low, high)', () => {
    const out = new Float64Array(2000);
    philoxUniform(out, 1, 0, -2, 3);
    const min = Math.min(...out);
    const max = Math.max(...out);
    expect(min).toBeGreaterThanOrEqual(-2);
    expect(max).toBeLessThan(3);
    const mean = out.reduce((s, v) => s + v, 0) / out.length;
    expect(Math.abs(mean - 0.5)).toBeLessThan(0.15);
  });

  it('gives Box-Muller normals with the requested moments', () => {
    const out = new Float64Array(4000);
    philoxNormal(out, 11, 0, 1.5, 2);
    const mean = out.reduce((s, v) => s + v, 0) / out.length;
    const variance = out.reduce((s, v) => s + (v - mean) ** 2, 0) / out.length;
    expect(Math.abs(mean - 1.5)).toBeLessThan(0.12);
    expect(Math.abs(Math.sqrt(variance) - 2)).toBeLessThan(0.12);
    const words = philox4x32(0, 0, 0, 0, 11, 0, new Uint32Array(4));
    const u1 = ((words[0]! >>> 8) + 1) / 2 ** 24;
    const u2 = (words[1]! >>> 8) / 2 ** 24;
    expect(out[0]).toBe(1.5 + 2 * Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2));
  });
});

describe('RandomGenerator', () => {
  it('advances its offset by each draw and restarts on manualSeed', () => {
    const g = new RandomGenerator(5);
    expect(g.next(10)).toEqual({ seed: 5, offset: 0 });
    expect(g.next(3)).toEqual({ seed: 5, offset: 10 });
    expect(g.offset).toBe(13);
    g.manualSeed(9);
    expect(g.getState()).toEqual({ seed: 9, offset: 0 });
    g.setState({ seed: 4, offset: 77 });
    expect(g.next(1)).toEqual({ seed: 4, offset: 77 });
  });

  it('rejects seeds that are not integers in [0, 2^53)', () => {
    expect(() => new RandomGenerator(-1)).toThrow(ArgumentError);
    expect(() => new RandomGenerator(1.5)).toThrow('[RandomGenerator] seed 1.5 is not an integer');
    expect(() => new RandomGenerator(0).setOffset(2 ** 53)).toThrow('[setOffset] offset');
  });
});
