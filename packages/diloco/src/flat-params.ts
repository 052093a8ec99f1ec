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
