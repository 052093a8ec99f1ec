import { describe, expect, it } from 'vitest';
import { generateProgram, type StressOp } from './program.js';
import { encode, reducedBits, reduceValue } from './reference.js';
import { deriveKey, Stream } from './random.js';

// [Note: stress reference]: the data of a reduction gives the same bits in every order of
// reduction, so the reference need not know the order a schedule takes.
function reduceInOrder(op: StressOp, order: readonly number[], size: number, i: number): number {
  const int = op.dtype === 'i32';
  const round = (v: number) => (int ? v | 0 : Math.fround(v));
  let acc = reduceValue(op, order[0]!, i);
  for (const r of order.slice(1)) {
    const v = reduceValue(op, r, i);
    if (op.reduce === 'sum' || op.reduce === 'avg') acc = round(acc + v);
    else if (op.reduce === 'product') acc = int ? Math.imul(acc, v) : round(acc * v);
    else acc = op.reduce === 'max' ? Math.max(acc, v) : Math.min(acc, v);
  }
  if (op.reduce === 'avg') acc = Math.fround(acc * Math.fround(1 / size));
  return encode(op.dtype, acc);
}

describe('stress reference', () => {
  it('gives every order of reduction the same bits, up to 8 ranks', () => {
    const program = generateProgram(7, 8, {
      ops: 400,
      maxBytes: 4096,
      maxPauseMs: 0,
      maxInFlight: 4,
      subGroups: false,
      bigTail: false,
    });
    const stream = new Stream(deriveKey(7, 99));
    let checked = 0;
    for (const batch of program.batches) {
      for (const op of batch.ops) {
        if (op.kind !== 'allReduce' && op.kind !== 'reduceScatter') continue;
        for (const size of [2, 3, 8]) {
          const ranks = Array.from({ length: size }, (_, r) => r);
          for (let i = 0; i < Math.min(op.count, 64); i++) {
            const shuffled = stream.subset(size, size).sort(() => stream.next() - 0.5);
            const want = reducedBits(op, size, i);
            expect(reduceInOrder(op, ranks, size, i)).toBe(want);
            expect(reduceInOrder(op, [...ranks].reverse(), size, i)).toBe(want);
            expect(reduceInOrder(op, shuffled, size, i)).toBe(want);
            checked++;
          }
        }
      }
    }
    expect(checked).toBeGreaterThan(1000);
  });

  it('draws the same program from the same seed, with sizes within the bound', () => {
    const options = {
      ops: 500,
      maxBytes: 1 << 20,
      maxPauseMs: 100,
      maxInFlight: 4,
      subGroups: true,
      bigTail: true,
    };
    const a = generateProgram(12345, 4, options);
    expect(generateProgram(12345, 4, options)).toEqual(a);
    expect(generateProgram(12346, 4, options)).not.toEqual(a);
    const ops = a.batches.flatMap((b) => b.ops);
    expect(ops.map((op) => op.index)).toEqual(ops.map((_, i) => i));
    for (const batch of a.batches) expect(batch.ops.length).toBeLessThanOrEqual(4);
    for (const op of ops) {
      const bytes = op.count * (op.dtype === 'f16' || op.dtype === 'bf16' ? 2 : 4);
      expect(bytes).toBeLessThanOrEqual(options.maxBytes * 1.5);
      if (op.dtype === 'i32') expect(op.reduce).not.toBe('avg');
    }
    expect(new Set(ops.map((op) => op.kind)).size).toBe(8);
  });
});
