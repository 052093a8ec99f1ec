/** The compressions that encode fixed blocks and average in two phases: `bf16`, `int8`, `int4`. */
export type BlockCompression = 'bf16' | 'int8' | 'int4';

/**
 * [Note: block codecs]
 * A codec turns blocks of `blockSize` f32 values into 32-bit words the collectives move bit for
 * bit (an `Int32Array`, which every transport carries), and back. `int8`: word 0 of a block is the
 * f32 scale max|x| / 127, the next blockSize / 4 words hold the bytes round(x / scale) in
 * [-127, 127] (a block of zeros has scale 0); decoding is q x scale in f32. `int4` (int4-codec.ts)
 * is the same at 4 bits: scale max|x| / 7, two's-complement nibbles in [-7, 7], eight to a word.
 * `bf16`: blockSize / 2 words of bfloat16 bits, rounded to nearest even (tensor-core's
 * `f32ToBf16Bits`). Bytes are read through views of the word buffer in the platform's order: every
 * runtime webshard runs on (x86, ARM, browsers there) is little-endian, and a rank decodes exactly
 * the bytes another encoded. Blocks past the end of the data encode zeros, so a codec never reads
 * or writes out of range. `topk` is not a block codec: its chunks hold a few values each and are
 * all-gathered, not reduce-scattered ([Note: sparse outer gradients] in topk-codec.ts).
 */
export interface BlockCodec {
  readonly name: BlockCompression;
  readonly blockSize: number;
  /** 32-bit words one encoded block takes. */
  readonly wordsPerBlock: number;
  /** Encode `values[block * blockSize ...]` (zeros past the end) into `out` at `wordOffset`. */
  encodeBlock(values: Float32Array, block: number, out: Int32Array, wordOffset: number): void;
  /**
   * Decode the block at `wordOffset` of `words` and add it into `into` from `start` (up to
   * `into.length`): `into[start + i] += decoded[i]`, or `=` with `assign`.
   */
  decodeBlock(
    words: Int32Array,
    wordOffset: number,
    into: Float32Array,
    start: number,
    assign: boolean,
  ): void;
}

/** The largest magnitude of `values[start, end)` (0 when empty): a block's scale comes from it. */
export function maxAbs(values: Float32Array, start: number, end: number): number {
  let max = 0;
  for (let i = start; i < end; i++) {
    const a = Math.abs(values[i]!);
    if (a > max) max = a;
  }
  return max;
}
