/**
 * A small deterministic 32-bit PRNG on the host (mulberry32): uniform numbers in [0, 1), the same
 * sequence for the same seed on every platform and rank. For what runs on the host beside the
 * tensors (the batches a data sampler draws, the inputs of a test, a fault plan); tensor ops draw
 * from Philox through a `RandomGenerator` instead. Not for cryptography.
 */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
