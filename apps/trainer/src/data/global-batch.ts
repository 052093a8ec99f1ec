import type { TokenBatch } from './batches.js';

/**
 * [Note: deterministic batches]
 * At step s, global sample j (0 <= j < B) starts at `((s * B + j) * T) mod (N - T - 1)`, T the
 * block size and N the token count: inputs are tokens [start, start + T), targets [start + 1,
 * start + T + 1). Consecutive samples are consecutive windows, so the run walks the data in order
 * and wraps. Rank r of W takes samples [r B / W, (r + 1) B / W), split in K micro-batches of
 * B / (W K) samples each, and the loss is the mean over all B T tokens: each micro-batch's mean
 * loss weighs 1 / K on every rank, and averaging the ranks' gradients finishes the mean. A batch
 * then depends only on (s, B, T, data), never on W or K, which is what lets a run on W ranks be
 * compared with the single-process one step for step.
 */

/** Where global sample `sample` of step `step` starts. */
export function sampleStart(
  step: number,
  sample: number,
  batchSize: number,
  blockSize: number,
  tokenCount: number,
): number {
  const period = tokenCount - blockSize - 1;
  // (s B + j) T can pass 2^53 only after 10^15 tokens; BigInt keeps it exact regardless.
  const index = (BigInt(step) * BigInt(batchSize) + BigInt(sample)) * BigInt(blockSize);
  return Number(index % BigInt(period));
}

/** What one rank computes at one step. */
export interface RankSlice {
  step: number;
  batchSize: number;
  blockSize: number;
  rank: number;
  worldSize: number;
  microBatches: number;
}

/** Rank `rank`'s micro-batches of step `step` (see [Note: deterministic batches]). */
export function rankMicroBatches(tokens: Int32Array, slice: RankSlice): TokenBatch[] {
  const { step, batchSize, blockSize, rank, worldSize, microBatches } = slice;
  const perRank = batchSize / worldSize;
  const perMicro = perRank / microBatches;
  const out: TokenBatch[] = [];
  for (let m = 0; m < microBatches; m++) {
    const inputs = new Int32Array(perMicro * blockSize);
    const targets = new Int32Array(perMicro * blockSize);
    for (let row = 0; row < perMicro; row++) {
      const sample = rank * perRank + m * perMicro + row;
      const start = sampleStart(step, sample, batchSize, blockSize, tokens.length);
      inputs.set(tokens.subarray(start, start + blockSize), row * blockSize);
      targets.set(tokens.subarray(start + 1, start + blockSize + 1), row * blockSize);
    }
    out.push({ inputs, targets, batchSize: perMicro, blockSize });
  }
  return out;
}
