import { ArgumentError } from '@webshard/tensor-core';

/** A deterministic 32-bit PRNG (mulberry32): the same seed gives the same batches everywhere. */
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

/** One language-model batch on the host: inputs and next-token targets, both [batch, block]. */
export interface TokenBatch {
  readonly inputs: Int32Array;
  readonly targets: Int32Array;
  readonly batchSize: number;
  readonly blockSize: number;
}

/**
 * Random windows of a token stream, as nanoGPT's `get_batch`: each row starts at a uniformly
 * drawn offset, and its targets are the inputs shifted by one token.
 */
export class BatchSampler {
  private readonly random: () => number;

  constructor(
    private readonly tokens: Int32Array,
    readonly batchSize: number,
    readonly blockSize: number,
    seed: number,
  ) {
    if (tokens.length <= blockSize) {
      throw new ArgumentError(
        'BatchSampler',
        `${tokens.length} tokens are too few for windows of ${blockSize} + 1`,
      );
    }
    this.random = mulberry32(seed);
  }

  next(): TokenBatch {
    const { batchSize, blockSize, tokens } = this;
    const inputs = new Int32Array(batchSize * blockSize);
    const targets = new Int32Array(batchSize * blockSize);
    for (let b = 0; b < batchSize; b++) {
      const start = Math.floor(this.random() * (tokens.length - blockSize));
      inputs.set(tokens.subarray(start, start + blockSize), b * blockSize);
      targets.set(tokens.subarray(start + 1, start + blockSize + 1), b * blockSize);
    }
    return { inputs, targets, batchSize, blockSize };
  }
}
