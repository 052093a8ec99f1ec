import type { Dense } from './kernel-common.js';
import { checkedTarget, ERROR_CODE } from './index-kernels.js';
import { type Launch, Params } from './program.js';
import type { ReduceContext } from './reduce-kernels.js';
import { type RowBinding, rowLaunch, rowProgram } from './row-kernels.js';

/**
 * [Note: cross entropy over wide rows]
 * `crossEntropyLaunch` gives each row one invocation, which folds the row's max and its sum of
 * exponentials in order: right for a small vocabulary, and on a GPU 1024 threads for GPT-2's
 * [1024, 50304] logits, each folding 50 304 elements two or three times (forward 9 ms, gradient
 * 17 ms of a 180 ms step on an H200, 2026-11-30). Rows of at least WIDE_COLS columns go in
 * segments instead: S = ceil(cols / SEGMENT) invocations a row, invocation s of a row folding its
 * columns s, s + S, ... (neighbouring invocations read neighbouring elements) into the segment's
 * max m_s and sum e_s of exp(x - m_s); one invocation a row then folds the segments in order into
 * the row's max M and sum, the sum of e_s exp(m_s - M), and writes the loss (M + log(sum) -
 * x[target]) or, for the gradient, M and the sum, from which invocation s of a row writes its
 * columns' softmax times the loss's gradient (less it at the target). The same formula as the
 * narrow kernel's, summed in another order, fixed by the shape, so every call and replay gives the
 * same bits. A bad target raises the op's error from the row's fold, as the narrow kernel does.
 * GPU adapters only: on the CPU adapters one invocation a row is the faster ([256, 50304] on
 * lavapipe 26 ms forward and 59 backward against 54 and 101 in segments; SwiftShader 116 and 181
 * against 120 and 234), as their lanes run neighbouring rows. So the loss's bits differ between
 * a CPU adapter and a GPU for rows this wide (ranks compute their own losses on their own data:
 * nothing is compared across ranks), where the reductions of [Note: reductions in passes] stay
 * the same on every adapter (ranks clip with one norm).
 */
/** Rows of at least this many columns go in segments. */
export const WIDE_COLS = 2048;
/** Columns a segment folds, at most. */
const SEGMENT = 256;

/** Segments a row of `cols` columns has ([Note: cross entropy over wide rows]). */
export function wideSegments(cols: number): number {
  return Math.ceil(cols / SEGMENT);
}

const f32 = (storage: Dense['storage'], size: number): Dense => ({
  storage,
  offset: 0,
  dtype: 'f32',
  size,
});

/** Each segment's max and sum of exponentials, side by side in `part`. */
function segmentsLaunch(logits: Dense, part: Dense, rows: number, cols: number): Launch {
  const segments = wideSegments(cols);
  const bindings: RowBinding[] = [
    { name: 'x', t: logits, extent: logits.size, mode: 'read' },
    { name: 'part', t: part, extent: part.size, mode: 'store' },
  ];
  const body = `let cols = prm[1];
  let segments = prm[3];
  let s = row % segments;
  let xb = prm[2] + (row / segments) * cols;
  var m = ld_x(xb + s);
  for (var c = s + segments; c < cols; c += segments) { m = max(m, ld_x(xb + c)); }
  var e = 0.0;
  for (var c = s; c < cols; c += segments) { e += exp(ld_x(xb + c) - m); }
  st_part(prm[4] + row * 2u, m);
  st_part(prm[4] + row * 2u + 1u, e);`;
  const params = new Params()
    .u(rows * segments)
    .u(cols)
    .u(logits.offset)
    .u(segments)
    .u(part.offset);
  const program = rowProgram('crossEntropySegments', '', bindings, body);
  return rowLaunch(program, bindings, params, rows * segments);
}

/**
 * One invocation a row: the segments folded in order into the row's max and sum, then the loss
 * (forward) or the two stats (for the gradient); the target checked, the op's error raised.
 */
function rowsLaunch(
  logits: Dense,
  targets: Dense,
  part: Dense,
  out: Dense,
  ignoreIndex: number,
  rows: number,
  cols: number,
  backward: boolean,
): Launch {
  // The logits only for the forward's loss: a binding the shader never reads is not in its layout.
  const bindings: RowBinding[] = [
    ...(backward ? [] : [{ name: 'x', t: logits, extent: logits.size, mode: 'read' } as const]),
    { name: 't', t: targets, extent: rows, mode: 'read' },
    { name: 'part', t: part, extent: part.size, mode: 'read' },
    { name: 'out', t: out, extent: out.size, mode: 'store' },
  ];
  const code = backward ? ERROR_CODE.crossEntropyBackward : ERROR_CODE.crossEntropy;
  const finish = backward
    ? `st_out(prm[4] + row * 2u, m);
  st_out(prm[4] + row * 2u + 1u, s);`
    : `if (ignored) { st_out(prm[4] + row, 0.0); return; }
  st_out(prm[4] + row, m + log(s) - ld_x(prm[2] + row * cols + u32(tc)));`;
  const body = `let cols = prm[1];
  let segments = prm[7];
  let pb = prm[6] + row * segments * 2u;
  ${checkedTarget(code)}
  var m = ld_part(pb);
  for (var k = 1u; k < segments; k++) { m = max(m, ld_part(pb + k * 2u)); }
  var s = 0.0;
  for (var k = 0u; k < segments; k++) { s += ld_part(pb + k * 2u + 1u) * exp(ld_part(pb + k * 2u) - m); }
  ${finish}`;
  const params = new Params()
    .u(rows)
    .u(cols)
    .u(logits.offset)
    .u(targets.offset)
    .u(out.offset)
    .i(ignoreIndex)
    .u(part.offset)
    .u(wideSegments(cols));
  const name = backward ? 'crossEntropyRowStats' : 'crossEntropyRows';
  const program = rowProgram(name, '', bindings, body, true);
  return rowLaunch(program, bindings, params, rows, true);
}

/** The gradient's columns, a segment an invocation, from each row's max and sum. */
function gradientLaunch(
  logits: Dense,
  targets: Dense,
  dLosses: Dense,
  stats: Dense,
  dLogits: Dense,
  ignoreIndex: number,
  rows: number,
  cols: number,
): Launch {
  const segments = wideSegments(cols);
  const bindings: RowBinding[] = [
    { name: 'x', t: logits, extent: logits.size, mode: 'read' },
    { name: 't', t: targets, extent: rows, mode: 'read' },
    { name: 'dl', t: dLosses, extent: rows, mode: 'read' },
    { name: 'st', t: stats, extent: stats.size, mode: 'read' },
    { name: 'out', t: dLogits, extent: dLogits.size, mode: 'store' },
  ];
  const body = `let cols = prm[1];
  let segments = prm[7];
  let r = row / segments;
  let s = row % segments;
  let ob = prm[4] + r * cols;
  let t = ld_t(prm[3] + r);
  if (t == pi(5u)) {
    for (var c = s; c < cols; c += segments) { st_out(ob + c, 0.0); }
    return;
  }
  var tc = t;
  if (t < 0 || u32(t) >= cols) { tc = 0; }
  let xb = prm[2] + r * cols;
  let m = ld_st(prm[8] + r * 2u);
  let dl = ld_dl(prm[6] + r);
  let scale = dl / ld_st(prm[8] + r * 2u + 1u);
  for (var c = s; c < cols; c += segments) {
    let p = exp(ld_x(xb + c) - m) * scale;
    st_out(ob + c, select(p, p - dl, c == u32(tc)));
  }`;
  const params = new Params()
    .u(rows * segments)
    .u(cols)
    .u(logits.offset)
    .u(targets.offset)
    .u(dLogits.offset)
    .i(ignoreIndex)
    .u(dLosses.offset)
    .u(segments)
    .u(stats.offset);
  const program = rowProgram('crossEntropyGradient', '', bindings, body);
  return rowLaunch(program, bindings, params, rows * segments);
}

/**
 * Cross entropy of [rows, cols] logits with cols >= WIDE_COLS, forward (`backward` null) or its
 * gradient: [Note: cross entropy over wide rows].
 */
export function runWideCrossEntropy(
  ctx: ReduceContext,
  logits: Dense,
  targets: Dense,
  losses: Dense,
  ignoreIndex: number,
  rows: number,
  cols: number,
  backward: { dLosses: Dense; dLogits: Dense } | null,
): void {
  const partSize = rows * wideSegments(cols) * 2;
  const partStorage = ctx.allocate(partSize * 4);
  const statsStorage = backward === null ? null : ctx.allocate(rows * 2 * 4);
  try {
    const part = f32(partStorage, partSize);
    ctx.run(segmentsLaunch(logits, part, rows, cols));
    if (backward === null) {
      ctx.run(rowsLaunch(logits, targets, part, losses, ignoreIndex, rows, cols, false));
      return;
    }
    const stats = f32(statsStorage!, rows * 2);
    ctx.run(rowsLaunch(logits, targets, part, stats, ignoreIndex, rows, cols, true));
    const { dLosses, dLogits } = backward;
    ctx.run(gradientLaunch(logits, targets, dLosses, stats, dLogits, ignoreIndex, rows, cols));
  } finally {
    ctx.release(partStorage);
    if (statsStorage !== null) ctx.release(statsStorage);
  }
}
