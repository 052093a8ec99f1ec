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
