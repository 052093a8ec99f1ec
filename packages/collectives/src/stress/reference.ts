import { f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '@webshard/tensor-core/backend';
import type { CommDType } from '../operand.js';
import { shardRange } from '../shard.js';
import type { StressOp } from './program.js';
import { hash3, hashAt, hashBase } from './random.js';

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
/** Elements per pass of the chunked loops. */
const CHUNK = 1 << 14;

/** Element `i` of the moved data of stream `stream` (0: the real data, others: prefill). */
export function moveBits(op: StressOp, stream: number, i: number): number {
  const h = hash3(op.key, stream, i);
  return op.dtype === 'f16' || op.dtype === 'bf16' ? h & 0xffff : h;
}

/** Fills `out` with elements `[start, start + out.length)` of moved-data stream `stream`. */
function fillMoved(op: StressOp, stream: number, start: number, out: Bits): void {
  const base = hashBase(op.key, stream);
  const mask = out instanceof Uint16Array ? 0xffff : 0xffffffff;
  for (let i = 0; i < out.length; i++) out[i] = hashAt(base, start + i) & mask;
}

/**
 * Fills `out` with elements `[start, start + out.length)` of group rank `rank`'s input of a
 * reduction, as the numbers they stand for. One loop per kind of data, each calling only
 * `hashAt` (which V8 inlines): the loops of a 256 MiB op run 64 Mi times per rank and rank.
 */
export function fillValues(
  op: StressOp,
  rank: number,
  start: number,
  out: Float64Array | Int32Array,
): void {
  const base = hashBase(op.key, 0x100 + rank);
  const { dtype } = op;
  const n = out.length;
  if (out instanceof Int32Array) {
    for (let i = 0; i < n; i++) out[i] = hashAt(base, start + i) | 0;
    return;
  }
  switch (op.reduce) {
    case 'sum':
    case 'avg':
      if (dtype === 'f32') {
        for (let i = 0; i < n; i++) out[i] = ((hashAt(base, start + i) & 0xffff) - 32768) / 256;
      } else if (dtype === 'f16') {
        for (let i = 0; i < n; i++) out[i] = ((hashAt(base, start + i) % 513) - 256) / 4;
      } else {
        for (let i = 0; i < n; i++) out[i] = ((hashAt(base, start + i) % 511) - 255) / 4;
      }
      return;
    case 'product':
      for (let i = 0; i < n; i++) {
        const h = hashAt(base, start + i);
        out[i] = h % 64 === 0 ? 0 : PRODUCT_VALUES[h % PRODUCT_VALUES.length]!;
      }
      return;
    default:
      for (let i = 0; i < n; i++)
        out[i] = decode(dtype, finiteBits(dtype, hashAt(base, start + i)));
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

/** Stores numbers (exact in f32, or i32) as `dtype` bits. */
function encodeAll(dtype: CommDType, values: Float64Array | Int32Array, out: Bits): void {
  if (dtype === 'f32') new Float32Array(out.buffer, out.byteOffset, out.length).set(values);
  else if (dtype === 'i32') new Int32Array(out.buffer, out.byteOffset, out.length).set(values);
  else {
    const narrow = dtype === 'f16' ? f32ToF16Bits : f32ToBf16Bits;
    for (let i = 0; i < out.length; i++) out[i] = narrow(values[i]!);
  }
}

/**
 * Elements `[start, start + out.length)` of the reduction over group ranks `0..size - 1` (or of
 * rank `only`'s input alone), as `dtype` bits: the ranks' values folded in rank order in doubles
 * (exact, see the note), scaled for `avg`, then stored as the dtype stores them.
 */
export function reduceChunk(op: StressOp, size: number, start: number, out: Bits, only = -1): void {
  const n = out.length;
  if (op.dtype === 'i32') {
    const acc = new Int32Array(n);
    fillValues(op, Math.max(only, 0), start, acc);
    const values = new Int32Array(n);
    for (let r = 1; only < 0 && r < size; r++) {
      fillValues(op, r, start, values);
      switch (op.reduce) {
        case 'product':
          for (let i = 0; i < n; i++) acc[i] = Math.imul(acc[i]!, values[i]!);
          break;
        case 'max':
          for (let i = 0; i < n; i++) acc[i] = Math.max(acc[i]!, values[i]!);
          break;
        case 'min':
          for (let i = 0; i < n; i++) acc[i] = Math.min(acc[i]!, values[i]!);
          break;
        default:
          for (let i = 0; i < n; i++) acc[i] = (acc[i]! + values[i]!) | 0;
      }
    }
    encodeAll(op.dtype, acc, out);
    return;
  }
  const acc = new Float64Array(n);
  fillValues(op, Math.max(only, 0), start, acc);
  const values = new Float64Array(n);
  for (let r = 1; only < 0 && r < size; r++) {
    fillValues(op, r, start, values);
    switch (op.reduce) {
      case 'product':
        for (let i = 0; i < n; i++) acc[i] = acc[i]! * values[i]!;
        break;
      case 'max':
        for (let i = 0; i < n; i++) acc[i] = Math.max(acc[i]!, values[i]!);
        break;
      case 'min':
        for (let i = 0; i < n; i++) acc[i] = Math.min(acc[i]!, values[i]!);
        break;
      default:
        for (let i = 0; i < n; i++) acc[i] = acc[i]! + values[i]!;
    }
  }
  if (only < 0 && op.reduce === 'avg') {
    const scale = Math.fround(1 / size);
    for (let i = 0; i < n; i++) acc[i] = Math.fround(acc[i]!) * scale;
  }
  encodeAll(op.dtype, acc, out);
}

/** Element `i` of the reduction over `size` group ranks, as `dtype` bits. */
export function reducedBits(op: StressOp, size: number, i: number): number {
  const out = op.dtype === 'f16' || op.dtype === 'bf16' ? new Uint16Array(1) : new Uint32Array(1);
  reduceChunk(op, size, i, out);
  return out[0]!;
}

/** Element `i` of group rank `rank`'s input of a reduction, as the number it stands for. */
export function reduceValue(op: StressOp, rank: number, i: number): number {
  const one = op.dtype === 'i32' ? new Int32Array(1) : new Float64Array(1);
  fillValues(op, rank, i, one);
  return one[0]!;
}

/** Runs `fill(start, piece)` over `target` in pieces of `CHUNK` elements. */
function chunked(target: Bits, fill: (start: number, piece: Bits) => void): void {
  for (let at = 0; at < target.length; at += CHUNK) {
    fill(at, target.subarray(at, Math.min(target.length, at + CHUNK)));
  }
}

/** Fills `target` with group rank `rank`'s input of `op` (a group of `size`). */
export function fillInput(op: StressOp, rank: number, size: number, target: Bits): void {
  switch (op.kind) {
    case 'allReduce':
    case 'reduceScatter':
      chunked(target, (start, piece) => reduceChunk(op, size, start, piece, rank));
      return;
    case 'allGather':
      fillMoved(op, 0, shardRange(op.count, size, rank).start, target);
      return;
    default:
      fillMoved(op, 0, 0, target);
  }
}

/** Fills an output with what no op writes (so an element left unwritten shows). */
export function fillGarbage(op: StressOp, rank: number, target: Bits): void {
  fillMoved(op, 0x1000 + rank, 0, target);
}

/**
 * The bits group rank `rank`'s output of `op` must hold: `expected(start, out)` fills `out` with
 * elements `[start, start + out.length)`.
 */
export function expectedOutput(
  op: StressOp,
  rank: number,
  size: number,
): (start: number, out: Bits) => void {
  switch (op.kind) {
    case 'allReduce':
      return (start, out) => chunked(out, (at, piece) => reduceChunk(op, size, start + at, piece));
    case 'reduceScatter': {
      const { start: shard } = shardRange(op.count, size, rank);
      return (start, out) =>
        chunked(out, (at, piece) => reduceChunk(op, size, shard + start + at, piece));
    }
    default:
      return (start, out) => fillMoved(op, 0, start, out);
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
