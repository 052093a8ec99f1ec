// The wire form of one top-k tile's entries: its sorted indices in Elias-Fano form, then their
// 2-bit codes, bit-packed little-endian into 32-bit words ([Note: top-k indices]).

/** What a tile's wire form depends on: its length L, its k entries, its Elias-Fano low bits. */
export interface TileSize {
  readonly length: number;
  readonly k: number;
  readonly lowBits: number;
}

/**
 * [Note: top-k indices]
 * A tile's k in-tile indices, sorted, are sent in Elias-Fano form (Elias 1974, Fano 1971), fixed
 * in size for a tile length L and k, so every rank's encoding has the same length and the
 * all-gather needs no sizes: each index split into its `l` low bits, sent as they are (k x l
 * bits), and its high part h = index >> l, sent in unary as a bitmap of k + ((L - 1) >> l) bits in
 * which entry j sets bit h_j + j; l is the width that makes the two smallest (ties: the lower).
 * For a 64 x 64 tile at 96 entries (l = 5): 480 + 223 = 703 bits, 7.3 an index where fixed-width
 * indices take 12 (ceil(log2 4096)), about half a bit above the information bound log2 C(4096, 96)
 * / 96 = 6.8. The 2-bit codes follow, k x 2 bits. A tile with fewer than k entries to send
 * repeats its last index (0 if none) with code 0; the decoder stops at the first index that does
 * not increase. What the saving buys: 96 entries a 64 x 64 tile in the bytes that 64 took with
 * 12-bit indices (120 bytes with the levels), [Note: sparse outer gradients].
 */

/** Low bits l of a tile's Elias-Fano indices: the fewest bits in all, ties to the lower l. */
function eliasFanoLowBits(length: number, k: number): number {
  let best = 0;
  let bestBits = Number.POSITIVE_INFINITY;
  for (let l = 0; l <= 16; l++) {
    const bits = k * l + ((length - 1) >>> l);
    if (bits < bestBits) {
      best = l;
      bestBits = bits;
    }
  }
  return best;
}

/** A tile of `length` elements sending `k` entries: its low bits and bits in all. */
export function tileBits(length: number, k: number): { lowBits: number; bits: number } {
  const lowBits = eliasFanoLowBits(length, k);
  return { lowBits, bits: k * lowBits + k + ((length - 1) >>> lowBits) + 2 * k };
}

/**
 * Write `tile`'s entries at bit `position` of the stream from word `base`: the increasing in-tile
 * `index` (at most k), Elias-Fano low bits then high bitmap, then each entry's 2-bit `code`; a
 * short list repeats its last index with code 0 ([Note: top-k indices]).
 */
export function writeTile(
  bits: Uint32Array,
  base: number,
  position: number,
  tile: TileSize,
  index: readonly number[],
  code: (j: number) => number,
): void {
  const { k, lowBits } = tile;
  const lowMask = 2 ** lowBits - 1;
  const highAt = position + k * lowBits;
  const codesAt = highAt + k + ((tile.length - 1) >>> lowBits);
  const last = index.length === 0 ? 0 : index[index.length - 1]!;
  for (let j = 0; j < k; j++) {
    const i = j < index.length ? index[j]! : last;
    if (lowBits > 0) writeBits(bits, base, position + j * lowBits, lowBits, i & lowMask);
    writeBits(bits, base, highAt + (i >>> lowBits) + j, 1, 1);
    if (j < index.length) writeBits(bits, base, codesAt + 2 * j, 2, code(j));
  }
}

/**
 * Read `tile`'s entries written by `writeTile`, calling `entry` with each in-tile index and code
 * until the indices stop increasing.
 */
export function readTile(
  bits: Uint32Array,
  base: number,
  position: number,
  tile: TileSize,
  entry: (index: number, code: number) => void,
): void {
  const { k, lowBits } = tile;
  const highAt = position + k * lowBits;
  const codesAt = highAt + k + ((tile.length - 1) >>> lowBits);
  let at = highAt;
  let previous = -1;
  for (let j = 0; j < k; j++) {
    at = nextSetBit(bits, base, at);
    const high = at - highAt - j;
    at++;
    const low = lowBits > 0 ? readBits(bits, base, position + j * lowBits, lowBits) : 0;
    const index = high * 2 ** lowBits + low;
    if (index <= previous) return;
    previous = index;
    entry(index, readBits(bits, base, codesAt + 2 * j, 2));
  }
}

/** The first set bit at or after bit `position` of the stream from word `base`. */
function nextSetBit(bits: Uint32Array, base: number, position: number): number {
  let word = position >>> 5;
  let rest = bits[base + word]! & (0xffffffff << (position & 31));
  while (rest === 0) rest = bits[base + ++word]!;
  return word * 32 + 31 - Math.clz32(rest & -rest);
}

/** OR `count` bits of `value` into the stream from word `base`, at bit `position`. */
function writeBits(
  bits: Uint32Array,
  base: number,
  position: number,
  count: number,
  value: number,
): void {
  const word = base + (position >>> 5);
  const offset = position & 31;
  bits[word] = (bits[word]! | (value << offset)) >>> 0;
  if (offset + count > 32) bits[word + 1] = (bits[word + 1]! | (value >>> (32 - offset))) >>> 0;
}

/** `count` bits of the stream from word `base`, at bit `position`. */
function readBits(bits: Uint32Array, base: number, position: number, count: number): number {
  const word = base + (position >>> 5);
  const offset = position & 31;
  let value = bits[word]! >>> offset;
  if (offset + count > 32) value |= bits[word + 1]! << (32 - offset);
  return (value & (2 ** count - 1)) >>> 0;
}
