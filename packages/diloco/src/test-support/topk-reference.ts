// A float64 reference of the topk compressor ([Note: sparse outer gradients]), written apart from
// topk-codec.ts: a sort of the indices per chunk, the two magnitudes as float64 means rounded to
// f32 (what the wire holds), the decoded values.

/** One chunk as the reference encodes it. */
export interface ReferenceChunk {
  /** Kept offsets in the chunk, increasing. */
  readonly kept: number[];
  /** The f32 magnitudes of the two levels. */
  readonly low: number;
  readonly high: number;
  /** The decoded value of each kept offset. */
  readonly decoded: number[];
}

/** The reference encoding of `values` (chunks of `chunkSize`, `k` kept a chunk). */
export function referenceTopk(
  values: ArrayLike<number>,
  chunkSize: number,
  k: number,
): ReferenceChunk[] {
  const chunks: ReferenceChunk[] = [];
  for (let start = 0; start < values.length; start += chunkSize) {
    const end = Math.min(values.length, start + chunkSize);
    const order: number[] = [];
    for (let i = start; i < end; i++) if (values[i] !== 0) order.push(i - start);
    order.sort((a, b) => Math.abs(values[start + b]!) - Math.abs(values[start + a]!) || a - b);
    const kept = order.slice(0, k).sort((a, b) => a - b);
    const magnitudes = kept.map((i) => Math.abs(values[start + i]!));
    const split = (Math.min(...magnitudes) + Math.max(...magnitudes)) / 2;
    const lows = magnitudes.filter((m) => m < split);
    const highs = magnitudes.filter((m) => m >= split);
    const mean = (xs: number[]) =>
      xs.length === 0 ? 0 : xs.reduce((s, x) => s + x, 0) / xs.length;
    const low = Math.fround(mean(lows));
    const high = Math.fround(mean(highs));
    const decoded = kept.map(
      (i, j) => Math.sign(values[start + i]!) * (magnitudes[j]! >= split ? high : low),
    );
    chunks.push({ kept, low, high, decoded });
  }
  return chunks;
}

/** The dense vector the reference encoding of `values` decodes to. */
export function referenceDecoded(
  values: ArrayLike<number>,
  chunkSize: number,
  k: number,
): Float64Array {
  const out = new Float64Array(values.length);
  for (const [c, chunk] of referenceTopk(values, chunkSize, k).entries()) {
    for (const [j, i] of chunk.kept.entries()) out[c * chunkSize + i] = chunk.decoded[j]!;
  }
  return out;
}

/**
 * The reference's tiles of `shapes` ([Note: top-k tiles]), as lists of flat positions, in-tile
 * order: each tensor a matrix (rows: the product of the leading sides), cut by the largest divisor
 * of each side at most `side`, tiles in row-major order; without shapes, runs of `side * side`
 * across the whole `count`.
 */
export function referenceTiles(
  shapes: readonly (readonly number[])[] | null,
  count: number,
  side: number,
): number[][][] {
  const divisor = (n: number) => {
    let best = 1;
    for (let d = 1; d <= Math.min(n, side); d++) if (n % d === 0) best = d;
    return best;
  };
  if (shapes === null) {
    const runs: number[][] = [];
    for (let start = 0; start < count; start += side * side) {
      const run: number[] = [];
      for (let i = start; i < Math.min(count, start + side * side); i++) run.push(i);
      runs.push(run);
    }
    return [runs];
  }
  const tensors: number[][][] = [];
  let offset = 0;
  for (const shape of shapes) {
    const size = shape.reduce((a, b) => a * b, 1);
    const cols = shape.at(-1) ?? 1;
    const rows = size / cols;
    const [h, w] = [divisor(rows), divisor(cols)];
    const tiles: number[][] = [];
    for (let ty = 0; ty < rows; ty += h) {
      for (let tx = 0; tx < cols; tx += w) {
        const tile: number[] = [];
        for (let a = 0; a < h; a++)
          for (let b = 0; b < w; b++) tile.push(offset + (ty + a) * cols + tx + b);
        tiles.push(tile);
      }
    }
    tensors.push(tiles);
    offset += size;
  }
  return tensors;
}

/**
 * The dense vector SparseLoCo's quantizer decodes `values` to, per tensor of `tensors` (tiles of
 * flat positions): the top k = max(1, round(density x tile length)) of each tile (zeros included,
 * ties to the lower position), then over the tensor's kept values the mean m, the unbiased
 * standard deviation s, bins of width 6 s / 4 (1 if s is 0), bin = round((x - m) / width + 2)
 * clamped to 0 .. 3, each decoded as f32(mean of its x - m) + f32(m), in f32.
 */
export function referenceTensorLevels(
  values: ArrayLike<number>,
  tensors: readonly (readonly (readonly number[])[])[],
  density: number,
): Float64Array {
  const out = new Float64Array(values.length);
  for (const tiles of tensors) {
    const kept: number[] = [];
    for (const tile of tiles) {
      const k = Math.min(tile.length, Math.max(1, Math.round(density * tile.length)));
      const order = tile.map((_, j) => j);
      order.sort((a, b) => Math.abs(values[tile[b]!]!) - Math.abs(values[tile[a]!]!) || a - b);
      for (const j of order.slice(0, k).sort((a, b) => a - b)) kept.push(tile[j]!);
    }
    const xs = kept.map((p) => values[p]!);
    const m = xs.reduce((s, x) => s + x, 0) / xs.length;
    const s =
      xs.length <= 1 ? 0 : Math.sqrt(xs.reduce((t, x) => t + (x - m) ** 2, 0) / (xs.length - 1));
    const width = s > 0 ? (6 * s) / 4 : 1;
    const bin = (x: number) => Math.min(3, Math.max(0, Math.round((x - m) / width + 2)));
    const sums = [0, 0, 0, 0];
    const counts = [0, 0, 0, 0];
    for (const x of xs) {
      sums[bin(x)]! += x - m;
      counts[bin(x)]!++;
    }
    const level = (b: number) => Math.fround(counts[b] === 0 ? 0 : sums[b]! / counts[b]!);
    for (const [j, p] of kept.entries()) out[p] = Math.fround(level(bin(xs[j]!)) + Math.fround(m));
  }
  return out;
}

/**
 * The dense vector per-tile levels decode `values` to, over `tiles` (lists of flat positions):
 * `referenceTopk` of each tile's values as one chunk.
 */
export function referenceTileLevels(
  values: ArrayLike<number>,
  tiles: readonly (readonly number[])[],
  density: number,
  k?: number,
): Float64Array {
  const out = new Float64Array(values.length);
  for (const tile of tiles) {
    const chunk = tile.map((p) => values[p]!);
    const kk = k ?? Math.min(tile.length, Math.max(1, Math.round(density * tile.length)));
    const [coded] = referenceTopk(chunk, tile.length, kk);
    for (const [j, i] of coded!.kept.entries()) out[tile[i]!] = coded!.decoded[j]!;
  }
  return out;
}
