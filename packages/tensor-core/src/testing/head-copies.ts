import { maskedFill, matmul, mul, reshape, softmax, split, transpose } from '../ops/index.js';
import type { Tensor } from '../tensor.js';

/**
 * `attendHeads` (nn/attention.ts) as the attention computed before [Note: matmul over strided
 * views]: qkv split, each part reshaped and permuted to [B, nh, T, hs] (a copy each), contiguous
 * batched matmuls, and y permuted back to [B, T, C] (one more copy). The tests check the strided
 * attention against it bit for bit; the benchmark times both.
 */
export function attendHeadsWithCopies(qkv: Tensor, nHead: number, mask: Tensor): Tensor {
  const [b, t, c3] = qkv.shape as [number, number, number];
  const c = c3 / 3;
  const hs = c / nHead;
  const temps: Tensor[] = [];
  const track = <T extends Tensor>(v: T): T => {
    temps.push(v);
    return v;
  };
  try {
    const [q, k, v] = split(qkv, c, 2).map((part) => {
      const r = track(reshape(track(part), [b, t, nHead, hs]));
      return track(transpose(r, 1, 2));
    }) as [Tensor, Tensor, Tensor];
    const scores = track(mul(track(matmul(q, k, { transposeB: true })), 1 / Math.sqrt(hs)));
    const att = track(softmax(track(maskedFill(scores, mask, -Infinity)), -1));
    const y = track(transpose(track(matmul(att, v)), 1, 2));
    return reshape(y, [b, t, c]);
  } finally {
    for (const temp of temps) temp.free();
  }
}
