import type { RawStorage, ReductionOp } from '../backend.js';
import { type Dense, ewLaunch, header, shapeSize } from './kernel-common.js';
import { elementwiseProgram, input, type Launch } from './program.js';
import { valueType } from './wgsl.js';

/**
 * [Note: reductions in two passes]
 * A reduction writes `outer * inner` outputs, each the fold of `length` elements `inner` apart,
 * one invocation an output folding its elements in order. That is right when there are several
 * outputs (a CPU adapter runs neighbouring invocations in the lanes of one SIMD register, so four
 * rows cost about what one does), and slow for one long output: the clip's partial norms sum each
 * gradient to one number (GPT-2's token embedding: 38.6 M floats), on one invocation, one lane of
 * one of a CPU adapter's threads, and on a GPU one of its thousands of threads. So a sum or a
 * mean with one output over at least `TWO_PASS_MIN` elements runs in two passes: `parts`
 * invocations each fold every `parts`-th element (invocation c the elements c, c + parts, ...:
 * neighbouring invocations read neighbouring elements) into a partial buffer, and one invocation
 * folds the `parts` partials in order. No barriers and no workgroup memory: a CPU adapter runs a
 * workgroup's barrier by switching between its invocations, and a tree in workgroup memory, one
 * workgroup an output, was 1.2-20x slower than the serial fold on lavapipe for several outputs;
 * for one it was about as fast as the two passes there, but one workgroup is one of a GPU's many
 * cores. Measured (2026-11-28, 30 calls each, 2-core EPYC): 2^18, 2^20 and 2^22
 * floats to one sum took 623, 881 and 4978 us against 1116, 3137 and 15 090 on lavapipe, and
 * 576, 2061 and 9813 against 2384, 7073 and 28 641 on SwiftShader; [4, 2^20] to 4 sums took
 * 4782 against 4065 and 10 699 against 7180, so several outputs stay serial. The order is fixed
 * by the shape, so the bits are the same on every call, every replay and every adapter that
 * rounds f32 adds as IEEE does; they differ from the serial fold's (as PyTorch's CUDA sums differ
 * from its CPU ones), and are nearer the exact sum (a partial folds 1/parts of the row). Max, min
 * and argmax keep the serial fold.
 */
/** One output over at least this many elements goes in two passes. */
const TWO_PASS_MIN = 1 << 18;
/** The elements one invocation of the first pass folds, at least (with at most 4096 invocations). */
const PER_PART = 1024;

/** The partials per output of a two-pass reduction; 1 where one pass is the better. */
function reduceParts(op: ReductionOp, outputs: number, length: number): number {
  if ((op !== 'sum' && op !== 'mean') || outputs !== 1 || length < TWO_PASS_MIN) return 1;
  return Math.min(4096, Math.ceil(length / PER_PART));
}

/** What running a reduction needs of the backend (the partials' temporary, and `run`). */
export interface ReduceContext {
  allocate(bytes: number): RawStorage;
  release(storage: RawStorage): void;
  run(launch: Launch): void;
}

/**
 * `out` = `x` (of `shape`) reduced over `axis`: one pass, or two through a temporary of the
 * compute type ([Note: reductions in two passes]).
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
  const parts = reduceParts(op, outer * inner, length);
  if (parts === 1 || (op !== 'sum' && op !== 'mean')) {
    ctx.run(reduceLaunch(op, x, outer, length, inner, out));
    return;
  }
  const dtype = x.dtype === 'i32' ? 'i32' : 'f32';
  const size = outer * inner * parts;
  const storage = ctx.allocate(size * 4);
  try {
    const partial = { storage, offset: 0, dtype, size } as const;
    for (const launch of twoPassReduceLaunches(op, x, length, inner, out, partial, parts)) {
      ctx.run(launch);
    }
  } finally {
    ctx.release(storage);
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
 * The two passes of [Note: reductions in two passes]: `partial` holds `parts` values of the
 * compute type per output.
 */
function twoPassReduceLaunches(
  op: 'sum' | 'mean',
  x: Dense,
  length: number,
  inner: number,
  out: Dense,
  partial: Dense,
  parts: number,
): [Launch, Launch] {
  const t = valueType(x.dtype);
  const zero = t === 'i32' ? '0' : '0.0';
  const first = elementwiseProgram({
    name: 'reduce_parts',
    key: 'sum',
    inputs: [{ name: 'x', dtype: x.dtype }],
    out: partial.dtype,
    body: `fn outv(q: u32) -> ${t} {
  let parts = prm[5];
  let i = q / parts;
  let inner = prm[4];
  let len = prm[3];
  let base = prm[2] + (i / inner) * len * inner + (i % inner);
  var acc = ${zero};
  for (var j = q % parts; j < len; j += parts) {
    acc += ld_x(base + j * inner);
  }
  return acc;
}`,
  });
  const result =
    op === 'mean'
      ? `${valueType(out.dtype)}(f32(acc) / f32(prm[4]))`
      : `${valueType(out.dtype)}(acc)`;
  const second = elementwiseProgram({
    name: `reduce_partials_${op}`,
    key: op,
    inputs: [{ name: 'p', dtype: partial.dtype }],
    out: out.dtype,
    body: `fn outv(i: u32) -> ${valueType(out.dtype)} {
  let parts = prm[3];
  let base = prm[2] + i * parts;
  var acc = ${zero};
  for (var c = 0u; c < parts; c++) {
    acc += ld_p(base + c);
  }
  return ${result};
}`,
  });
  return [
    ewLaunch(
      first,
      [x.dtype, partial.dtype],
      [input(x, x.size)],
      partial,
      header(partial).u(x.offset).u(length).u(inner).u(parts),
    ),
    ewLaunch(
      second,
      [partial.dtype, out.dtype],
      [input(partial, partial.size)],
      out,
      header(out).u(partial.offset).u(parts).u(length),
    ),
  ];
}
