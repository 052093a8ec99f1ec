// The matmul module's attention functions as the threads call them ([Note: attention's heads in
// one call] in attention-kernel.ts): their types, a call's words in the control block, and the
// loop each thread runs over the call's chunks of pairs.

/** Both functions' last arguments: the pairs [p0, p1), heads, T, head size and the scale. */
type Pairs = [
  p0: number,
  p1: number,
  nh: number,
  t: number,
  hs: number,
  scale: number,
  f32Scale: number,
];

/**
 * The module's `attention_forward` export: for the pairs (batch element, head) p0 <= p < p1 of
 * qkv, att's blocks and y's heads; byte addresses, `work` the calling thread's own (k^T).
 */
export type AttentionForward = (
  qkv: number,
  mask: number,
  att: number,
  y: number,
  work: number,
  ...pairs: Pairs
) => void;

/**
 * The module's `attention_backward` export: q's, k's and v's gradients of pairs [p0, p1) into
 * dqkv from att and dy; `work` the calling thread's own (v^T, then the scores' gradient).
 */
export type AttentionBackward = (
  qkv: number,
  mask: number,
  att: number,
  dy: number,
  dqkv: number,
  work: number,
  ...pairs: Pairs
) => void;

/**
 * An attention call's words, from the control block's ARGS on: the direction (0 forward, 1
 * backward), the byte addresses of qkv, the mask, att, y (dy backward), dqkv (backward), thread
 * 0's work and the bytes between two threads' works, the pairs, heads, T and the head size,
 * whether the scale is an f32, pairs a chunk, and the byte address of the scale (an f64 in the
 * module's memory).
 */
export const ATTENTION_WORDS = 15;

/**
 * Claims and computes chunks of pairs of an attention call until none is left; returns the chunks
 * it did. Each pair is computed alone, by the same instructions, so the bits do not depend on
 * who computes which. `memory` is the module's memory. Runs on every thread (the workers get its
 * source), so it uses nothing outside its arguments.
 */
export function attentionChunks(
  forward: AttentionForward,
  backward: AttentionBackward,
  ctl: Int32Array,
  memory: ArrayBuffer | SharedArrayBuffer,
  args: number,
  next: number,
  thread: number,
): number {
  // No inner functions (see packChunks in matmul-worker.ts): the words one by one.
  const [dir, qkv, mask, att, y, dqkv] = [
    ctl[args]!,
    ctl[args + 1]!,
    ctl[args + 2]!,
    ctl[args + 3]!,
    ctl[args + 4]!,
    ctl[args + 5]!,
  ];
  const work = ctl[args + 6]! + thread * ctl[args + 7]!;
  const [pairs, nh, t, hs, f32Scale, per] = [
    ctl[args + 8]!,
    ctl[args + 9]!,
    ctl[args + 10]!,
    ctl[args + 11]!,
    ctl[args + 12]!,
    ctl[args + 13]!,
  ];
  const scale = new Float64Array(memory, ctl[args + 14]!, 1)[0]!;
  let done = 0;
  for (let i = Atomics.add(ctl, next, 1) * per; i < pairs; i = Atomics.add(ctl, next, 1) * per) {
    const end = Math.min(pairs, i + per);
    if (dir === 0) forward(qkv, mask, att, y, work, i, end, nh, t, hs, scale, f32Scale);
    else backward(qkv, mask, att, y, dqkv, work, i, end, nh, t, hs, scale, f32Scale);
    done++;
  }
  return done;
}
