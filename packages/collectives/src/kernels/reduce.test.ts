import { describe, expect, it } from 'vitest';
import { REDUCE_OPS, ReduceArena, SharedReducer } from './reduce.js';

function reference(op: string, a: number, b: number, dtype: 'f32' | 'i32'): number {
  if (dtype === 'i32') {
    switch (op) {
      case 'max':
        return Math.max(a, b);
      case 'min':
        return Math.min(a, b);
      case 'product':
        return Math.imul(a, b);
      default:
        return (a + b) | 0;
    }
  }
  switch (op) {
    case 'max':
      return Math.max(a, b);
    case 'min':
      return Math.min(a, b);
    case 'product':
      return Math.fround(a * b);
    default:
      return Math.fround(a + b);
  }
}

describe('ReduceArena kernels', () => {
  for (const dtype of ['f32', 'i32'] as const) {
    for (const op of REDUCE_OPS) {
      it(`${op} ${dtype} matches scalar math for lengths around the SIMD width`, () => {
        const arena = new ReduceArena();
        for (const n of [0, 1, 3, 4, 5, 17, 1031]) {
          arena.ensure(8 * n + 64);
          const view = dtype === 'f32' ? arena.f32(0, 2 * n) : arena.i32(0, 2 * n);
          const a: number[] = [];
          const b: number[] = [];
          for (let i = 0; i < n; i++) {
            const x = dtype === 'f32' ? Math.fround(Math.sin(i) * 100) : (i * 2654435761) | 0;
            const y = dtype === 'f32' ? Math.fround(Math.cos(i * 3) * 50) : (i * 40503 - 7) | 0;
            a.push(x);
            b.push(y);
            view[i] = x;
            view[n + i] = y;
          }
          arena.reduce(op, dtype, 0, 4 * n, n);
          const out = dtype === 'f32' ? arena.f32(0, n) : arena.i32(0, n);
          for (let i = 0; i < n; i++) expect(out[i]).toBe(reference(op, a[i]!, b[i]!, dtype));
          expect(Array.from(dtype === 'f32' ? arena.f32(4 * n, n) : arena.i32(4 * n, n))).toEqual(
            b,
          );
        }
      });
    }
  }

  for (const dtype of ['f32', 'i32'] as const) {
    for (const op of REDUCE_OPS) {
      it(`${op} ${dtype} into a third operand, and in place over its second`, () => {
        const arena = new ReduceArena();
        const n = 1031;
        arena.ensure(12 * n + 64);
        const view = dtype === 'f32' ? arena.f32(0, 3 * n) : arena.i32(0, 3 * n);
        for (let i = 0; i < n; i++) {
          view[i] = dtype === 'f32' ? Math.fround(Math.sin(i) * 100) : (i * 2654435761) | 0;
          view[n + i] = dtype === 'f32' ? Math.fround(Math.cos(i * 3) * 50) : (i * 40503 - 7) | 0;
        }
        const a = Array.from(view.subarray(0, n));
        const b = Array.from(view.subarray(n, 2 * n));
        const expected = a.map((x, i) => reference(op, x, b[i]!, dtype));
        arena.reduceTo(op, dtype, 8 * n, 0, 4 * n, n);
        expect(Array.from(view.subarray(2 * n))).toEqual(expected);
        expect(Array.from(view.subarray(0, n))).toEqual(a);
        arena.reduceTo(op, dtype, 4 * n, 0, 4 * n, n);
        expect(Array.from(view.subarray(n, 2 * n))).toEqual(expected);
      });
    }
  }

  it('scale multiplies in f32 and memory growth keeps the data', () => {
    const arena = new ReduceArena();
    arena.ensure(64);
    arena.f32(0, 5).set([1, 2, 3, 4, 5]);
    arena.ensure(1 << 20);
    arena.scale(0, 5, 1 / 3);
    expect(Array.from(arena.f32(0, 5))).toEqual(
      [1, 2, 3, 4, 5].map((x) => Math.fround(x * Math.fround(1 / 3))),
    );
  });

  it('zero clears exactly its bytes, in its own memory and in a shared one', () => {
    const arena = new ReduceArena();
    arena.ensure(4096);
    const shared = new WebAssembly.Memory({ initial: 1, maximum: 4, shared: true });
    for (const [kernels, buffer] of [
      [arena, () => arena.bytes(0, 4096)],
      [new SharedReducer(shared), () => new Uint8Array(shared.buffer, 0, 4096)],
    ] as const) {
      buffer().fill(9);
      // Unaligned start and length: memory.fill has no alignment, unlike the 4-byte kernels.
      kernels.zero(3, 1021);
      kernels.zero(2000, 0);
      const bytes = Array.from(buffer());
      expect(bytes.slice(0, 3)).toEqual([9, 9, 9]);
      expect(bytes.slice(3, 1024).every((b) => b === 0)).toBe(true);
      expect(bytes.slice(1024).every((b) => b === 9)).toBe(true);
    }
  });
});
