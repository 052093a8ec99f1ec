import type { Tensor } from '@webshard/tensor-core';

/**
 * The values of `params` (or of those at `indices`, in that order) as one flat f32 vector: how
 * DiLoCo holds a global copy and a pseudo-gradient.
 */
export async function readFlat(
  params: readonly Tensor[],
  indices: readonly number[] = params.map((_, i) => i),
): Promise<Float32Array> {
  const out = new Float32Array(indices.reduce((sum, i) => sum + params[i]!.size, 0));
  let offset = 0;
  for (const i of indices) {
    const p = params[i]!;
    out.set((await p.read()) as Float32Array, offset);
    offset += p.size;
  }
  return out;
}

/** Set `params` (or those at `indices`, in that order) from `flat`, as `readFlat` laid it out. */
export function writeFlat(
  params: readonly Tensor[],
  flat: Float32Array,
  indices: readonly number[] = params.map((_, i) => i),
): void {
  let offset = 0;
  for (const i of indices) {
    const p = params[i]!;
    p.write(flat.subarray(offset, offset + p.size));
    offset += p.size;
  }
}

/**
 * Where each tensor of a parameter list lies in the flat parameter-order vector, and the
 * contiguous parts of a subset of them (a streamed fragment's) taken out of it or put back.
 */
export class FlatLayout {
  private readonly starts: number[] = [];
  private readonly total: number;

  constructor(private readonly sizes: readonly number[]) {
    let offset = 0;
    for (const size of sizes) {
      this.starts.push(offset);
      offset += size;
    }
    this.total = offset;
  }

  /** The tensors `tensors` of `flat`, one after another. */
  pick(flat: Float32Array, tensors: readonly number[]): Float32Array {
    const out = new Float32Array(tensors.reduce((sum, t) => sum + this.sizes[t]!, 0));
    let offset = 0;
    for (const t of tensors) {
      const size = this.sizes[t]!;
      out.set(flat.subarray(this.starts[t]!, this.starts[t]! + size), offset);
      offset += size;
    }
    return out;
  }

  /** A flat vector from each part's contiguous values of its tensors (zeros for null). */
  gather(parts: readonly (readonly [readonly number[], Float32Array | null])[]): Float32Array {
    const flat = new Float32Array(this.total);
    for (const [tensors, values] of parts) {
      if (values === null) continue;
      let offset = 0;
      for (const t of tensors) {
        const size = this.sizes[t]!;
        flat.set(values.subarray(offset, offset + size), this.starts[t]!);
        offset += size;
      }
    }
    return flat;
  }
}
