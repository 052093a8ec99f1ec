import { batchedMatmul, reshape } from '../ops/index.js';
import type { Tensor } from '../tensor.js';

/**
 * [Note: folded weight gradient]
 * A 2-D weight times a batched input (`x [B, M, K] @ W [1, K, N]`, a linear layer over [B, T, C])
 * has dW = sum over b of x_b^T g_b. Taking that as a batched matmul and then summing builds a
 * [B, K, N] intermediate (618 MB for GPT-2's 768 x 50304 head at B4 T256) and reduces it. Since
 * every tensor is contiguous, x and g reshape for free to [1, B*M, K] and [1, B*M, N], and one
 * matmul with B*M as its reduction dim gives dW directly, as PyTorch does (dY^T X over [B*T, .]).
 * Only when the reshape is free: a transposed x ([B, K, M]) would need a copy, so it keeps the
 * batched matmul and the sum, as does a broadcast first operand (its reduction dim is g's last).
 */
export function foldsWeightGrad(a: Tensor, bShape: readonly number[], tA: boolean): boolean {
  return !tA && bShape[0] === 1 && a.shape[0]! > 1;
}

/** dW of `a @ W` (or `a @ W^T` if tB) for a [B, M, K] and W [1, K, N]: one [1, ., .] matmul. */
export function foldedWeightGrad(a: Tensor, g: Tensor, tB: boolean): Tensor {
  const [batch, m, k] = a.shape as [number, number, number];
  const rows = batch * m;
  const aFlat = reshape(a, [1, rows, k]);
  const gFlat = reshape(g, [1, rows, g.shape[2]!]);
  return tB
    ? batchedMatmul(gFlat, aFlat, { transposeA: true })
    : batchedMatmul(aFlat, gFlat, { transposeA: true });
}
