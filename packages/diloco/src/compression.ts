import { bf16BitsToF32, f32ToBf16Bits } from '@webshard/tensor-core/backend';

/**
 * How the pseudo-gradients travel in the outer all-reduce: `f32` as they are, `bf16` rounded to
 * bfloat16 (2 bytes an element), `int8` as signed bytes with one f32 scale per block (1 byte an
 * element plus 4 bytes a block).
 */
export type OuterCompression = 'f32' | 'bf16' | 'int8';

/** The compressions, in the order the docs list them. */
export const OUTER_COMPRESSIONS: readonly OuterCompression[] = ['f32', 'bf16', 'int8'];

/** Elements per block (one int8 scale each) unless the options say otherwise. */
export const DEFAULT_BLOCK_SIZE = 256;

/**
 * [Note: block codecs]
 * A codec turns blocks of `blockSize` f32 values into 32-bit words the collectives move bit for
 * bit (an `Int32Array`, which every transport carries), and back. `int8`: word 0 of a block is the
 * f32 scale max|x| / 127, the next blockSize / 4 words hold the bytes round(x / scale) in
 * [-127, 127] (a block of zeros has scale 0); decoding is q x scale in f32. `bf16`: blockSize / 2
 * words of bfloat16 bits, rounded to nearest even (tensor-core's `f32ToBf16Bits`). Bytes are read
 * through views of the word buffer in the platform's order: every runtime webshard runs on (x86,
 * ARM, browsers there) is little-endian, and a rank decodes exactly the bytes another encoded.
 * Blocks past the end of the data encode zeros, so a codec never reads or writes out of range.
 */
export interface BlockCodec {
  readonly name: Exclude<OuterCompression, 'f32'>;
  readonly blockSize: number;
  /** 32-bit words one encoded block takes. */
  readonly wordsPerBlock: number;
  /** Encode `values[block * blockSize ...]` (zeros past the end) into `out` at `wordOffset`. */
  encodeBlock(values: Float32Array, block: number, out: Int32Array, wordOffset: number): void;
  /**
   * Decode the block at `wordOffset` of `words` and add it, times `weight`, into `into` from
   * `start` (up to `into.length`): `into[start + i] += weight x decoded[i]`, or `=` with `assign`.
   */
  decodeBlock(
    words: Int32Array,
    wordOffset: number,
    into: Float32Array,
    start: number,
    assign: boolean,
  ): void;
}

class Int8Codec implements BlockCodec {
  readonly name = 'int8';
  readonly wordsPerBlock: number;
  constructor(readonly blockSize: number) {
    this.wordsPerBlock = 1 + blockSize / 4;
  }

  encodeBlock(values: Float32Array, block: number, out: Int32Array, wordOffset: number): void {
    const start = block * this.blockSize;
    const end = Math.min(values.length, start + this.blockSize);
    let max = 0;
    for (let i = start; i < end; i++) {
      const a = Math.abs(values[i]!);
      if (a > max) max = a;
    }
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
export function blockCodec(
  compression: Exclude<OuterCompression, 'f32'>,
  blockSize: number,
): BlockCodec {
  return compression === 'int8' ? new Int8Codec(blockSize) : new Bf16Codec(blockSize);
}

/**
 * [Note: error feedback]
 * What a lossy codec drops is not lost: `encodeWithFeedback` encodes meant = values + residual and
 * keeps residual = meant - decoded(sent) for the next round (EF-SGD, as INTELLECT-1 does for its
 * int8 pseudo-gradients). Over T rounds the sum of what was sent is the sum of what was meant
 * minus the last residual, which one quantization step bounds: the error does not grow with T.
 */
export function encodeWithFeedback(
  codec: BlockCodec,
  values: Float32Array,
  residual: Float32Array | null,
  blocks: number,
  out: Int32Array,
): void {
  const meant = residual === null ? values : addInto(residual, values);
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

/** `residual += values`, returning `residual` (which then holds what is meant to be sent). */
function addInto(residual: Float32Array, values: Float32Array): Float32Array {
  for (let i = 0; i < values.length; i++) residual[i]! += values[i]!;
  return residual;
}
