import { f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '@webshard/tensor-core/backend';
import type { CommDType } from '../operand.js';
import { shardRange } from '../shard.js';
import type { StressOp } from './program.js';
import { hash3 } from './random.js';

/**
 * [Note: stress reference]
 * Every rank computes what each of its outputs must hold from the op's key alone
 * ([Note: stress randomness]), bit for bit. Data that is only moved (gathers, broadcasts, sends)
 * is random bits, NaN payloads and all. Data that is reduced is drawn so that the f32 result is
 * exact in every order the schedules may reduce in (the ring's order around the ring, the direct
 * exchange's and the arena's rank order, the two-level phases), so the reference needs no model
 * of the order: sums and averages of multiples of 1/256 under 128 in magnitude (1/4 under 64 for
 * f16, 1/4 under 64 with 8 significant bits for bf16), products of values from {+-0.5, +-1, +-1.5,
 * +-2, +-3} and a few zeros, maxima and minima of any finite value but -0 (whose order against
 * +0 a max may not define); i32 anything, as it wraps. Up to 8 ranks keep every partial result
 * exact in f32. An average is the f32 sum times f32(1 / size), as documented, and f16/bf16 results
 * are that f32 rounded to nearest even once.
 */

/** The bits of a host array, as unsigned words of its element size. */
export type Bits = Uint32Array | Uint16Array;

const PRODUCT_VALUES = [-3, -2, -1.5, -1, -0.5, 0.5, 1, 1.5, 2, 3];
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** Element `i` of the moved data of stream `stream` (0: the real data, others: prefill). */
export function moveBits(op: StressOp, stream: number, i: number): number {
  const h = hash3(op.key, stream, i);
  return op.dtype === 'f16' || op.dtype === 'bf16' ? h & 0xffff : h;
}

/** Element `i` of group rank `rank`'s input of a reduction, as the number it stands for. */
export function reduceValue(op: StressOp, rank: number, i: number): number {
  const h = hash3(op.key, 0x100 + rank, i);
  const { dtype } = op;
  if (dtype === 'i32') return h | 0;
  switch (op.reduce) {
    case 'sum':
    case 'avg':
      if (dtype === 'f32') return ((h & 0xffff) - 32768) / 256;
      return dtype === 'f16' ? ((h % 513) - 256) / 4 : ((h % 511) - 255) / 4;
    case 'product':
      return h % 64 === 0 ? 0 : PRODUCT_VALUES[h % PRODUCT_VALUES.length]!;
    default:
      return decode(dtype, finiteBits(dtype, h));
  }
}

/** `h` as bits of a finite value of `dtype` other than -0. */
function finiteBits(dtype: CommDType, h: number): number {
  if (dtype === 'f32') {
    let bits = h;
    if (((bits >>> 23) & 0xff) === 0xff) bits ^= 0x40000000;
    return bits === 0x80000000 ? 0 : bits;
  }
  let bits = h & 0xffff;
  const [shift, mask] = dtype === 'f16' ? [10, 0x1f] : [7, 0xff];
  if (((bits >>> shift) & mask) === mask) bits ^= 1 << (shift + (dtype === 'f16' ? 3 : 6));
  return bits === 0x8000 ? 0 : bits;
}

function decode(dtype: CommDType, bits: number): number {
  if (dtype === 'f16') return f16BitsToF32(bits);
  u32[0] = dtype === 'bf16' ? bits << 16 : bits;
  return f32[0]!;
}

/** The bits of `value` (exact in f32, or an i32) as `dtype` stores it. */
export function encode(dtype: CommDType, value: number): number {
  if (dtype === 'i32') return value >>> 0;
  if (dtype === 'f16') return f32ToF16Bits(value);
  if (dtype === 'bf16') return f32ToBf16Bits(value);
  f32[0] = value;
  return u32[0]!;
}

/** The reduction of element `i` over `size` group ranks, as `dtype` bits. */
export function reducedBits(op: StressOp, size: number, i: number): number {
  let acc = reduceValue(op, 0, i);
  const int = op.dtype === 'i32';
  for (let r = 1; r < size; r++) {
    const v = reduceValue(op, r, i);
    switch (op.reduce) {
      case 'sum':
      case 'avg':
        acc = int ? (acc + v) | 0 : acc + v;
        break;
      case 'product':
        acc = int ? Math.imul(acc, v) : acc * v;
        break;
      case 'max':
        acc = Math.max(acc, v);
        break;
      case 'min':
        acc = Math.min(acc, v);
        break;
    }
  }
  if (op.reduce === 'avg') acc = Math.fround(acc) * Math.fround(1 / size);
  return encode(op.dtype, int ? acc : Math.fround(acc));
}

/** Fills `target` with group rank `rank`'s input of `op` (a group of `size`). */
export function fillInput(op: StressOp, rank: number, size: number, target: Bits): void {
  switch (op.kind) {
    case 'allReduce':
    case 'reduceScatter':
      for (let i = 0; i < target.length; i++)
        target[i] = encode(op.dtype, reduceValue(op, rank, i));
      return;
    case 'allGather': {
      const { start } = shardRange(op.count, size, rank);
      for (let i = 0; i < target.length; i++) target[i] = moveBits(op, 0, start + i);
      return;
    }
    default:
      for (let i = 0; i < target.length; i++) target[i] = moveBits(op, 0, i);
  }
}

/** Fills an output with what no op writes (so an element left unwritten shows). */
export function fillGarbage(op: StressOp, rank: number, target: Bits): void {
  for (let i = 0; i < target.length; i++) target[i] = moveBits(op, 0x1000 + rank, i);
}

/**
 * The bits group rank `rank`'s output of `op` must hold: `expected(start, out)` fills
 * `out` with elements `[start, start + out.length)`.
 */
export function expectedOutput(
  op: StressOp,
  rank: number,
  size: number,
): (start: number, out: Bits) => void {
  switch (op.kind) {
    case 'allReduce':
      return (start, out) => {
        for (let i = 0; i < out.length; i++) out[i] = reducedBits(op, size, start + i);
      };
    case 'reduceScatter': {
      const shard = shardRange(op.count, size, rank);
      return (start, out) => {
        for (let i = 0; i < out.length; i++)
          out[i] = reducedBits(op, size, shard.start + start + i);
      };
    }
    default:
      return (start, out) => {
        for (let i = 0; i < out.length; i++) out[i] = moveBits(op, 0, start + i);
      };
  }
}

const SPECIALS = [
  Number.NaN,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
  -0,
  0,
  Number.MIN_VALUE,
  Number.MAX_VALUE,
];

/** The number group rank `rank` passes to a scalar helper: any float64, specials often. */
export function scalarValue(op: StressOp, rank: number): number {
  const h = hash3(op.key, 0x200 + rank, 0);
  if (h % 8 === 0) return SPECIALS[(h >>> 3) % SPECIALS.length]!;
  const words = new Uint32Array([hash3(op.key, 0x200 + rank, 1), hash3(op.key, 0x200 + rank, 2)]);
  return new Float64Array(words.buffer)[0]!;
}
