import { type BlockCodec, maxAbs } from './block-codec.js';

/**
 * `int4`: the int8 codec at 4 bits ([Note: block codecs]), for Streaming DiLoCo's 4-bit outer
 * gradients. Word 0 of a block is the f32 scale max|x| / 7; then blockSize / 2 bytes, element 2j
 * in the low nibble of byte j and 2j + 1 in the high one, each round(x / scale) in [-7, 7] as a
 * two's-complement nibble (-8 is never written, so the grid is symmetric), padded to whole words.
 * Decoding is q x scale in f32. Streaming DiLoCo's 4 bits are floats (E3M0) without a scale; this
 * keeps int8's per-block scale and its error feedback, which make a uniform grid enough.
 */
export class Int4Codec implements BlockCodec {
  readonly name = 'int4';
  readonly wordsPerBlock: number;
  constructor(readonly blockSize: number) {
    this.wordsPerBlock = 1 + Math.ceil(blockSize / 8);
  }

  encodeBlock(values: Float32Array, block: number, out: Int32Array, wordOffset: number): void {
    const start = block * this.blockSize;
    const end = Math.min(values.length, start + this.blockSize);
    const max = maxAbs(values, start, end);
    const scale = Math.fround(max / 7);
    new Float32Array(out.buffer, out.byteOffset, out.length)[wordOffset] = scale;
    const bytes = this.bytes(out, wordOffset);
    bytes.fill(0);
    if (scale === 0 || !Number.isFinite(scale)) return;
    const inverse = 1 / scale;
    for (let i = start, j = 0; i < end; i++, j++) {
      const q = Math.min(7, Math.max(-7, Math.round(values[i]! * inverse))) & 0xf;
      bytes[j >> 1]! |= j & 1 ? q << 4 : q;
    }
  }

  decodeBlock(
    words: Int32Array,
    wordOffset: number,
    into: Float32Array,
    start: number,
    assign: boolean,
  ): void {
    const scale = new Float32Array(words.buffer, words.byteOffset, words.length)[wordOffset]!;
    const bytes = this.bytes(words, wordOffset);
    const n = Math.min(this.blockSize, into.length - start);
    for (let i = 0; i < n; i++) {
      const nibble = (i & 1 ? bytes[i >> 1]! >> 4 : bytes[i >> 1]!) & 0xf;
      const value = ((nibble ^ 8) - 8) * scale;
      if (assign) into[start + i] = value;
      else into[start + i]! += value;
    }
  }

  /** The nibble bytes of the block at `wordOffset` (after its scale word). */
  private bytes(words: Int32Array, wordOffset: number): Uint8Array {
    return new Uint8Array(
      words.buffer,
      words.byteOffset + (wordOffset + 1) * 4,
      (this.wordsPerBlock - 1) * 4,
    );
  }
}
