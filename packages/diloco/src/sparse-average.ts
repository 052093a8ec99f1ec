import type { ProcessGroup } from '@webshard/collectives';
import { encodeSparseWithFeedback, type TopkCodec } from './topk-codec.js';

/**
 * [Note: averaging sparse contributions]
 * Each rank encodes its tiles ([Note: sparse outer gradients], [Note: top-k tiles]) into the same
 * number of words (k entries a tile, zero entries where it has fewer), so the group's `allGather`
 * moves them as they are: every rank then decodes the n contributions in rank order into zeros, counting the
 * ranks that sent each position, and divides each position by that count, the same bits
 * everywhere. So a position is the mean over the ranks that sent it, not over all n: SparseLoCo's
 * reference code aggregates this way (a `scatter_reduce` with `reduce="mean"` and
 * `include_self=False` over the gathered indices), although its paper writes 1 / R x the sum.
 * Dividing by n shrank every entry that fewer than n ranks sent, though each sender's buffer had
 * already subtracted it whole: on the trainer's GPT (4 ranks, H = 50, 20 outer steps) the
 * held-out loss was 12.6 % above DDP's with the mean over n and 2.2 % above with the mean over
 * senders (default seed, runs of 4096 across tensors then; apps/trainer's README has the rest). A
 * rank with nothing to send (an elastic newcomer at `weight` 0, no residual) sends no entry that
 * decodes to a non-zero value, and so drops out of every mean by itself: the others keep `weight` 1 ([Note: DiLoCo in an elastic world]). Bytes a rank sends, for
 * S encoded bytes a rank (S = 0.032 P on the trainer's GPT at the defaults, P elements) and n
 * ranks:
 * - this all-gather (direct or ring): (n - 1) S; 3 S = 0.096 P at n = 4;
 * - decoding to dense and an f32 all-reduce: 2 (n - 1) / n x 4 P = 6 P at n = 4 (62x more);
 *   int8's two phases on the dense vector: 2 (n - 1) / n x 1.0156 P (16x more);
 * - two phases on the sparse entries (entries sent to the rank owning their shard, which sums
 *   them and all-gathers its shard): the summed shard holds up to n k entries a tile, so sent
 *   whole it costs (n - 1) S again, plus phase 1. Only a second top-k of the sum, back to k a
 *   tile, saves bytes: 2 (n - 1) / n S, 1.5 S at n = 4, equal to the all-gather at n = 2. It is
 *   not taken: the second top-k is a lossy step that one rank takes for all (what it drops needs a
 *   residual on the shard's owner, tied to the shard split and lost at each regroup of an elastic
 *   world), the average is no longer the mean of what the ranks sent, and it takes two rounds of
 *   latency instead of one.
 * At the bench's 4 ranks and 106 368 parameters: each tensor's tiles at 96 of 4096 with
 * Elias-Fano indices, 3416 bytes encoded, 10 248 sent per sync, against DDP's 638 208 a step:
 * 3114x fewer at H = 50. The all-gather's (n - 1)
 * grows with the group: past some tens of ranks the two phases (or a tree of them) would win.
 */
export async function averageSparse(
  group: ProcessGroup,
  codec: TopkCodec,
  values: Float32Array,
  residual: Float32Array | null,
  decay: number,
  timeoutMs: number | undefined,
): Promise<number> {
  const n = group.size;
  const words = codec.words;
  const mine = new Int32Array(words);
  encodeSparseWithFeedback(codec, values, residual, decay, mine);
  const gathered = n === 1 ? mine : new Int32Array(words * n);
  if (n > 1) await group.allGather(mine, gathered, { timeoutMs }).wait();
  values.fill(0);
  const senders = n === 1 ? undefined : new Uint32Array(values.length);
  for (let r = 0; r < n; r++) codec.decode(gathered, r * words, values, 1, senders);
  if (senders !== undefined) {
    for (let i = 0; i < values.length; i++) if (senders[i]! > 1) values[i]! /= senders[i]!;
  }
  return (n - 1) * words * 4;
}
