import { ArgumentError, mulberry32 } from '@webshard/tensor-core';

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
