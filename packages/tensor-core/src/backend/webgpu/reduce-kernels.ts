import type { RawStorage, ReductionOp } from '../backend.js';
import { type Dense, ewLaunch, header, shapeSize } from './kernel-common.js';
import { elementwiseProgram, input, type Launch } from './program.js';
import { valueType } from './wgsl.js';

/**
 * [Note: reductions in passes]
 * A reduction writes `outer * inner` outputs, each the fold of `length` elements `inner` apart,
 * one invocation an output folding its elements in order. That is right when there are several
 * outputs (a CPU adapter runs neighbouring invocations in the lanes of one SIMD register, so four
 * rows cost about what one does), and slow for one long output: the clip's partial norms sum each
 * gradient to one number (GPT-2's token embedding: 38.6 M floats), on one invocation, one lane of
 * one of a CPU adapter's threads, and on a GPU one of its thousands of threads. So a sum or a
 * mean with one output over at least `PASSES_MIN` elements runs in passes: the first has
 * `ceil(length / FAN_IN)` invocations, invocation c folding the elements c, c + parts, ... (at
 * most FAN_IN of them; neighbouring invocations read neighbouring elements) into partials; each
 * next pass folds the partials the same way, FAN_IN to one, until one invocation folds the last
 * ones in order. No barriers and no workgroup memory: a CPU adapter runs a workgroup's barrier by
 * switching between its invocations, and a tree in workgroup memory, one workgroup an output, was
 * 1.2-20x slower than the serial fold on lavapipe for several outputs. The order is fixed by the
 * shape alone, so the bits are the same on every call, every replay and every adapter that rounds
 * f32 adds as IEEE does (ranks on different GPUs clip with the same norm); they differ from the
 * serial fold's (as PyTorch's CUDA sums differ from its CPU ones), and are nearer the exact sum.
 * Max, min and argmax keep the serial fold.
 *
 * History: two passes first, the first of at most 4096 invocations folding 1024 elements or more
 * each (2026-11-28: 2^20 floats to one sum 881 against 3137 us serial on lavapipe, 2061 against
 * 7073 on SwiftShader). On a real GPU (an H200 through Dawn's Vulkan, 2026-11-30) 4096
 * invocations are a few warps for 132 cores: the sums of GPT-2's clip took 93 ms of a 230 ms step
 * (38.6 M floats to one sum 34 ms), which FAN_IN elements an invocation and more passes spread.
 */
/** One output over at least this many elements goes in passes. */
const PASSES_MIN = 1 << 18;
/** The elements (or partials) one invocation of a pass folds, at most. */
const FAN_IN = 256;

/**
 * The partials each pass of a reduction to one output over `length` elements writes, the last
 * pass's 1 included ([Note: reductions in passes]); `[1]` where one pass is the better.
 */
export function reducePasses(op: ReductionOp, outputs: number, length: number): number[] {
  if ((op !== 'sum' && op !== 'mean') || outputs !== 1 || length < PASSES_MIN) return [1];
  const passes: number[] = [];
  for (let n = length; n > 1; ) {
    n = n > FAN_IN ? Math.ceil(n / FAN_IN) : 1;
    passes.push(n);
  }
  return passes;
}

/** What running a reduction needs of the backend (the partials' temporary, and `run`). */
export interface ReduceContext {
  allocate(bytes: number): RawStorage;
  release(storage: RawStorage): void;
  run(launch: Launch): void;
}

/**
 * `out` = `x` (of `shape`) reduced over `axis`: one pass, or several through a temporary of the
 * compute type ([Note: reductions in passes]).
 */
export function runReduce(
  ctx: ReduceContext,
  op: ReductionOp,
  x: Dense,
  shape: readonly number[],
  axis: number,
  out: Dense,
): void {
  const outer = shapeSize(shape.slice(0, axis));
  const inner = shapeSize(shape.slice(axis + 1));
  const length = shape[axis] ?? 1;
  const passes = reducePasses(op, outer * inner, length);
  if (passes.length === 1 || (op !== 'sum' && op !== 'mean')) {
    ctx.run(reduceLaunch(op, x, outer, length, inner, out));
    return;
  }
  // One output: x's `length` elements lie contiguous from its offset (outer and inner are 1).
  // The partials alternate between two temporaries: a dispatch that read and wrote one buffer
  // would be given a copy of it (a buffer is not bound as input and output at once).
  const dtype = x.dtype === 'i32' ? 'i32' : 'f32';
  const partials = passes.slice(0, -1);
  const largest = (parity: number) => Math.max(0, ...partials.filter((_, i) => i % 2 === parity));
  const temps = [ctx.allocate(largest(0) * 4)];
  try {
    if (partials.length > 1) temps.push(ctx.allocate(largest(1) * 4));
    let from: Dense = { ...x, size: length };
    partials.forEach((parts, i) => {
      const to: Dense = { storage: temps[i % 2]!, offset: 0, dtype, size: parts };
      ctx.run(foldLaunch(from, to));
      from = to;
    });
    ctx.run(lastFoldLaunch(op, from, length, out));
  } finally {
    for (const storage of temps) ctx.release(storage);
  }
}

/** One invocation an output, folding its elements in order. */
export function reduceLaunch(
  op: ReductionOp,
  x: Dense,
  outer: number,
  length: number,
  inner: number,
  out: Dense,
): Launch {
  const t = valueType(x.dtype);
  const init =
    op === 'sum' || op === 'mean'
      ? `var acc = ${t === 'i32' ? '0' : '0.0'};`
      : 'var acc = ld_x(base);';
  const step =
    op === 'sum' || op === 'mean'
      ? 'acc += v;'
      : op === 'max'
        ? t === 'f32'
          ? 'if (!is_nan(acc)) { acc = select(max(acc, v), v, is_nan(v)); }'
          : 'acc = max(acc, v);'
        : op === 'min'
          ? t === 'f32'
            ? 'if (!is_nan(acc)) { acc = select(min(acc, v), v, is_nan(v)); }'
            : 'acc = min(acc, v);'
          : 'if (v > acc) { acc = v; best = j; }';
  const result =
    op === 'mean'
      ? `${valueType(out.dtype)}(f32(acc) / f32(len))`
      : op === 'argmax'
        ? 'i32(best)'
        : `${valueType(out.dtype)}(acc)`;
  const body = `fn outv(i: u32) -> ${valueType(out.dtype)} {
  let inner = prm[4];
  let len = prm[3];
  let base = prm[2] + (i / inner) * len * inner + (i % inner);
  ${init}
  var best = 0u;
  for (var j = 0u; j < len; j++) {
    let v = ld_x(base + j * inner);
    ${step}
  }
  return ${result};
}`;
  const program = elementwiseProgram({
    name: `reduce_${op}`,
    key: op,
    inputs: [{ name: 'x', dtype: x.dtype }],
    out: out.dtype,
    body,
  });
  void outer;
  return ewLaunch(
    program,
    [x.dtype, out.dtype],
    [input(x, x.size)],
    out,
    header(out).u(x.offset).u(length).u(inner),
  );
}

/**
 * A pass of [Note: reductions in passes]: `to.size` invocations, invocation q folding `from`'s
 * elements q, q + to.size, ... in order, in the compute type (`to`'s).
 */
function foldLaunch(from: Dense, to: Dense): Launch {
  const t = valueType(to.dtype);
  const program = elementwiseProgram({
    name: 'reduce_fold',
    key: 'sum',
    inputs: [{ name: 'x', dtype: from.dtype }],
    out: to.dtype,
    body: `fn outv(q: u32) -> ${t} {
  let parts = prm[1];
  let base = prm[2];
  let len = prm[3];
  var acc = ${t === 'i32' ? '0' : '0.0'};
  for (var j = q; j < len; j += parts) {
    acc += ld_x(base + j);
  }
  return acc;
}`,
  });
  return ewLaunch(
    program,
    [from.dtype, to.dtype],
    [input(from, from.size)],
    to,
    header(to).u(from.offset).u(from.size),
  );
}

/** The last pass: one invocation folds the partials in order (and divides a mean by `length`). */
function lastFoldLaunch(op: 'sum' | 'mean', from: Dense, length: number, out: Dense): Launch {
  const zero = from.dtype === 'i32' ? '0' : '0.0';
  const result =
    op === 'mean'
      ? `${valueType(out.dtype)}(f32(acc) / f32(prm[4]))`
      : `${valueType(out.dtype)}(acc)`;
  const program = elementwiseProgram({
    name: `reduce_partials_${op}`,
    key: op,
    inputs: [{ name: 'p', dtype: from.dtype }],
    out: out.dtype,
    body: `fn outv(i: u32) -> ${valueType(out.dtype)} {
  let base = prm[2];
  let parts = prm[3];
  var acc = ${zero};
  for (var c = 0u; c < parts; c++) {
    acc += ld_p(base + c);
  }
  return ${result};
}`,
  });
  return ewLaunch(
    program,
    [from.dtype, out.dtype],
    [input(from, from.size)],
    out,
    header(out).u(from.offset).u(from.size).u(length),
  );
}
