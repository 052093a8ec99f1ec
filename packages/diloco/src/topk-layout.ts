import { tileBits } from './topk-indices.js';

/**
 * One tile of a top-k layout: `rows` x `cols` elements of the flat vector, row r at `offset + r x
 * stride`; its in-tile index i is row floor(i / cols), column i mod cols. `k` entries are sent
 * for it in `bits` bits: their indices in Elias-Fano form with `lowBits` low bits each, then their
 * 2-bit codes ([Note: top-k indices]).
 */
export interface TopkTile {
  readonly offset: number;
  readonly rows: number;
  readonly cols: number;
  readonly stride: number;
  readonly k: number;
  readonly lowBits: number;
  readonly bits: number;
}

/**
 * Tiles that share one table of 2-bit levels (a segment): `headerWords` f32 words of levels, then
 * the tiles' entries bit-packed one after another, padded to a whole word.
 */
export interface TopkSegment {
  readonly tiles: readonly TopkTile[];
  readonly headerWords: number;
  /** Words the segment takes on the wire: the levels and the packed entries. */
  readonly words: number;
}

/** How the kept values are quantized: per tile, or per tensor ([Note: sparse outer gradients]). */
export type TopkLevels = 'tile' | 'tensor';
/** The choices of `TopkLevels`. */
export const TOPK_LEVELS: readonly TopkLevels[] = ['tile', 'tensor'];
/** `topk`'s levels unless the options say otherwise. */
export const DEFAULT_TOPK_LEVELS: TopkLevels = 'tile';

/** f32 words of levels a segment carries: two magnitudes per tile, mean + 4 bins per tensor. */
export const LEVEL_WORDS: Readonly<Record<TopkLevels, number>> = { tile: 2, tensor: 5 };

/**
 * [Note: top-k tiles]
 * Where the k entries are picked. Given the parameters' shapes (DiLoCo passes them), each tensor
 * is tiled on its own, as SparseLoCo's reference code does: a tensor of shape [..., c] is a matrix
 * of r = (product of the leading sides) rows and c columns (a 1-D tensor: one row), cut into tiles
 * of h x w, where h is the largest divisor of r and w of c that is at most `side` (a 1-D tensor:
 * runs of w); side = floor(sqrt(blockSize)), 64 at the default 4096. A tile of L elements sends
 * k = max(1, round(density x L)) entries ([Note: top-k indices] for their bits): a 64 x 64 tile
 * 96 at the default density, a run of 64 (a LayerNorm gain, a bias) 2. A side with no
 * divisor in 2 .. side (a prime above it) gives tiles 1 wide, each sending its element: correct
 * but dense, as in the reference; no tensor of the trainer's GPTs has one. Without shapes (the
 * averager used alone), the flat vector is cut into runs of blockSize, which cross tensors, and
 * every run, the last included, takes the k and bits of a whole run.
 */
export function topkLayout(
  shapes: readonly (readonly number[])[] | null,
  count: number,
  blockSize: number,
  density: number,
  levels: TopkLevels,
): TopkSegment[] {
  const kOf = (length: number) => Math.min(length, Math.max(1, Math.round(density * length)));
  const groups: TopkTile[][] = [];
  if (shapes === null) {
    const k = kOf(blockSize);
    const sized = tileBits(blockSize, k);
    const tiles: TopkTile[] = [];
    for (let offset = 0; offset < count; offset += blockSize) {
      const cols = Math.min(blockSize, count - offset);
      tiles.push({ offset, rows: 1, cols, stride: cols, k, ...sized });
    }
    // Per-tile levels: a segment per run; per-tensor levels: the whole vector is one tensor.
    if (levels === 'tile') for (const tile of tiles) groups.push([tile]);
    else if (tiles.length > 0) groups.push(tiles);
  } else {
    const side = Math.max(1, Math.floor(Math.sqrt(blockSize)));
    let offset = 0;
    for (const shape of shapes) {
      const size = shape.reduce((a, b) => a * b, 1);
      if (size === 0) continue;
      const cols = shape.length === 0 ? 1 : shape[shape.length - 1]!;
      const rows = size / cols;
      const h = largestDivisorAtMost(rows, side);
      const w = largestDivisorAtMost(cols, side);
      const k = kOf(h * w);
      const sized = tileBits(h * w, k);
      const tiles: TopkTile[] = [];
      for (let ty = 0; ty < rows / h; ty++) {
        for (let tx = 0; tx < cols / w; tx++) {
          tiles.push({
            offset: offset + ty * h * cols + tx * w,
            rows: h,
            cols: w,
            stride: cols,
            k,
            ...sized,
          });
        }
      }
      if (levels === 'tile') for (const tile of tiles) groups.push([tile]);
      else groups.push(tiles);
      offset += size;
    }
  }
  return groups.map((tiles) => {
    const bits = tiles.reduce((sum, t) => sum + t.bits, 0);
    const headerWords = LEVEL_WORDS[levels];
    return { tiles, headerWords, words: headerWords + Math.ceil(bits / 32) };
  });
}

/** The largest divisor of `n` that is at most `limit`. */
function largestDivisorAtMost(n: number, limit: number): number {
  for (let d = Math.min(n, limit); d > 1; d--) if (n % d === 0) return d;
  return 1;
}
