import { mulberry32 } from '@webshard/tensor-core';

/**
 * The MLP's data: each global sample i of a seeded stream is an input x of `nIn` standard normals
 * and a target y = tanh(x W) of `nOut` values, W a fixed seeded matrix. A sample depends only on
 * (seed, i), as a token window depends only on its index (see [Note: deterministic batches]).
 * The held-out stream is a different seed.
 */
export interface RegressionBatch {
  x: Float32Array;
  y: Float32Array;
  batchSize: number;
}

function normals(random: () => number, out: Float32Array): void {
  for (let i = 0; i < out.length; i++) {
    const u = Math.max(random(), 1e-12);
    out[i] = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
  }
}

/** Samples `first .. first + count - 1` of the stream seeded `seed`. */
export function regressionBatch(
  seed: number,
  first: number,
  count: number,
  nIn: number,
  nOut: number,
): RegressionBatch {
  const teacher = new Float32Array(nIn * nOut);
  normals(mulberry32(seed ^ 0x5bd1e995), teacher);
  const x = new Float32Array(count * nIn);
  const y = new Float32Array(count * nOut);
  for (let row = 0; row < count; row++) {
    const xi = x.subarray(row * nIn, (row + 1) * nIn);
    normals(mulberry32((seed * 0x9e3779b1 + first + row) >>> 0), xi);
    for (let k = 0; k < nOut; k++) {
      let s = 0;
      for (let i = 0; i < nIn; i++) s += xi[i]! * teacher[i * nOut + k]!;
      y[row * nOut + k] = Math.tanh(s / Math.sqrt(nIn));
    }
  }
  return { x, y, batchSize: count };
}
