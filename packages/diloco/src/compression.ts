import { bf16BitsToF32, f32ToBf16Bits } from '@webshard/tensor-core/backend';
import { type BlockCodec, type BlockCompression, maxAbs } from './block-codec.js';
import { Int4Codec } from './int4-codec.js';

/**
 * How the pseudo-gradients travel in the outer average: `f32` as they are, `bf16` rounded to
 * bfloat16 (2 bytes an element), `int8` as signed bytes with one f32 scale per block (1 byte an
 * element plus 4 bytes a block), `int4` as nibbles with a scale per block (half a byte an element
 * plus 4 bytes a block), `topk` as the few largest of each chunk, their values in 2 bits
 * ([Note: sparse outer gradients]).
 */
export type OuterCompression = 'f32' | BlockCompression | 'topk';

/** The compressions, in the order the docs list them. */
export const OUTER_COMPRESSIONS: readonly OuterCompression[] = [
  'f32',
  'bf16',
  'int8',
  'int4',
  'topk',
];

/** Elements per block (one int8 or int4 scale each) unless the options say otherwise. */
export const DEFAULT_BLOCK_SIZE = 256;

class Int8Codec implements BlockCodec {
  readonly name = 'int8';
  readonly wordsPerBlock: number;
  constructor(readonly blockSize: number) {
    this.wordsPerBlock = 1 + blockSize / 4;
  }

  encodeBlock(values: Float32Array, block: number, out: Int32Array, wordOffset: number): void {
    const start = block * this.blockSize;
    const end = Math.min(values.length, start + this.blockSize);
    const max = maxAbs(values, start, end);
    const scale = Math.fround(max / 127);
    const floats = new Float32Array(out.buffer, out.byteOffset, out.length);
    floats[wordOffset] = scale;
    const bytes = new Int8Array(out.buffer, out.byteOffset + (wordOffset + 1) * 4, this.blockSize);
    if (scale === 0 || !Number.isFinite(scale)) {
      bytes.fill(0);
      return;
    }
    const inverse = 1 / scale;
    let j = 0;
    for (let i = start; i < end; i++, j++) {
      const q = Math.round(values[i]! * inverse);
      bytes[j] = Math.min(127, Math.max(-127, q));
    }
    bytes.fill(0, j);
  }

  decodeBlock(
    words: Int32Array,
    wordOffset: number,
    into: Float32Array,
    start: number,
    assign: boolean,
  ): void {
    const scale = new Float32Array(words.buffer, words.byteOffset, words.length)[wordOffset]!;
    const bytes = new Int8Array(
      words.buffer,
      words.byteOffset + (wordOffset + 1) * 4,
      this.blockSize,
    );
    const n = Math.min(this.blockSize, into.length - start);
    if (assign) for (let i = 0; i < n; i++) into[start + i] = bytes[i]! * scale;
    else for (let i = 0; i < n; i++) into[start + i]! += bytes[i]! * scale;
  }
}

class Bf16Codec implements BlockCodec {
  readonly name = 'bf16';
  readonly wordsPerBlock: number;
  constructor(readonly blockSize: number) {
    this.wordsPerBlock = blockSize / 2;
  }

  encodeBlock(values: Float32Array, block: number, out: Int32Array, wordOffset: number): void {
    const start = block * this.blockSize;
    const end = Math.min(values.length, start + this.blockSize);
    const halves = new Uint16Array(out.buffer, out.byteOffset + wordOffset * 4, this.blockSize);
    let j = 0;
    for (let i = start; i < end; i++, j++) halves[j] = f32ToBf16Bits(values[i]!);
    halves.fill(0, j);
  }

  decodeBlock(
    words: Int32Array,
    wordOffset: number,
    into: Float32Array,
    start: number,
    assign: boolean,
  ): void {
    const halves = new Uint16Array(words.buffer, words.byteOffset + wordOffset * 4, this.blockSize);
    const n = Math.min(this.blockSize, into.length - start);
    if (assign) for (let i = 0; i < n; i++) into[start + i] = bf16BitsToF32(halves[i]!);
    else for (let i = 0; i < n; i++) into[start + i]! += bf16BitsToF32(halves[i]!);
  }
}

/** The codec of a compression (`blockSize` a positive multiple of 4, checked by the caller). */
export function blockCodec(compression: BlockCompression, blockSize: number): BlockCodec {
  if (compression === 'int8') return new Int8Codec(blockSize);
  if (compression === 'int4') return new Int4Codec(blockSize);
  return new Bf16Codec(blockSize);
}

/**
 * [Note: error feedback]
 * What a lossy codec drops is not lost: `encodeWithFeedback` encodes meant = values + residual and
 * keeps residual = meant - decoded(sent) for the next round (EF-SGD, as INTELLECT-1 does for its
 * int8 pseudo-gradients). Over T rounds the sum of what was sent is the sum of what was meant
 * minus the last residual, which one quantization step bounds: the error does not grow with T.
 * With a `decay` below 1 the residual fades first (meant = values + decay x residual), as
 * SparseLoCo's buffer does ([Note: sparse outer gradients]); the default 1 is plain EF-SGD.
 */
export function encodeWithFeedback(
  codec: BlockCodec,
  values: Float32Array,
  residual: Float32Array | null,
  blocks: number,
  out: Int32Array,
  decay = 1,
): void {
  const meant = residual === null ? values : addInto(residual, values, decay);
  for (let b = 0; b < blocks; b++) codec.encodeBlock(meant, b, out, b * codec.wordsPerBlock);
  if (residual === null) return;
  // residual currently holds `meant`; subtract what the blocks decode to.
  const sent = new Float32Array(codec.blockSize);
  for (let b = 0; b < blocks; b++) {
    const start = b * codec.blockSize;
    if (start >= residual.length) break;
    codec.decodeBlock(out, b * codec.wordsPerBlock, sent, 0, true);
    const n = Math.min(codec.blockSize, residual.length - start);
    for (let i = 0; i < n; i++) residual[start + i]! -= sent[i]!;
  }
}

/** `residual = decay x residual + values`, returning `residual` (what is meant to be sent). */
function addInto(residual: Float32Array, values: Float32Array, decay: number): Float32Array {
  if (decay === 1) for (let i = 0; i < values.length; i++) residual[i]! += values[i]!;
  else for (let i = 0; i < values.length; i++) residual[i] = decay * residual[i]! + values[i]!;
  return residual;
}
