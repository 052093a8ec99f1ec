import type { DType } from '../../dtype.js';
import {
  type Launch,
  type LaunchBinding,
  type Operand,
  output,
  Params,
  type Program,
} from './program.js';

/** A contiguous operand with its element count. */
export interface Dense extends Operand {
  readonly size: number;
}

export function ewLaunch(
  program: Program,
  dtypes: DType[],
  ins: LaunchBinding[],
  out: Dense,
  params: Params,
  usesError = false,
): Launch {
  return {
    program,
    dtypes,
    bindings: [...ins, output(out, out.size)],
    params: params.toArray(),
    shape: [out.size],
    usesError,
  };
}

export function header(out: Dense): Params {
  return new Params().u(out.offset).u(out.size);
}

/** See [Note: cast semantics] (dtype-convert.ts). */
export function castBody(from: DType, to: DType): string {
  if (to === 'i32') return 'fn outv(i: u32) -> i32 { return f32_to_i32(ld_x(prm[2] + i)); }';
  if (from === 'i32') return 'fn outv(i: u32) -> f32 { return i32_to_f32(ld_x(prm[2] + i)); }';
  return 'fn outv(i: u32) -> f32 { return ld_x(prm[2] + i); }';
}

// ---- shapes ---------------------------------------------------------------------------------

/** Merges adjacent dims that every operand walks contiguously; drops size-1 dims. */
export function coalesce(
  shape: readonly number[],
  strides: readonly (readonly number[])[],
): { shape: number[]; strides: number[][] } {
  const outShape: number[] = [];
  const outStrides: number[][] = strides.map(() => []);
  for (let d = 0; d < shape.length; d++) {
    const dim = shape[d]!;
    if (dim === 1) continue;
    const last = outShape.length - 1;
    if (last >= 0 && strides.every((s, k) => outStrides[k]![last] === s[d]! * dim)) {
      outShape[last] = outShape[last]! * dim;
      strides.forEach((s, k) => {
        outStrides[k]![last] = s[d]!;
      });
      continue;
    }
    outShape.push(dim);
    strides.forEach((s, k) => {
      outStrides[k]!.push(s[d]!);
    });
  }
  if (outShape.length === 0) {
    outShape.push(1);
    for (const s of outStrides) s.push(0);
  }
  return { shape: outShape, strides: outStrides };
}

/** Row-major strides of `shape`, with 0 for broadcast (size-1) dims of `operand` right-aligned to it. */
export function broadcastStrides(operand: readonly number[], shape: readonly number[]): number[] {
  const strides = new Array<number>(shape.length).fill(0);
  let stride = 1;
  for (let k = 1; k <= operand.length; k++) {
    const dim = operand[operand.length - k]!;
    strides[shape.length - k] = dim === 1 ? 0 : stride;
    stride *= dim;
  }
  return strides;
}

/** WGSL `fn NAME(i: u32) -> u32` mapping a logical index to a strided offset; dims at prm[dimsAt]. */
export function stridedIndexFn(
  name: string,
  rank: number,
  dimsAt: number,
  stridesAt: number,
): string {
  return `fn ${name}(i: u32) -> u32 {
  var r = i;
  var o = 0u;
  for (var k = ${rank - 1}; k >= 0; k--) {
    let dim = prm[${dimsAt}u + u32(k)];
    o += (r % dim) * prm[${stridesAt}u + u32(k)];
    r = r / dim;
  }
  return o;
}`;
}

export function shapeSize(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

// ---- unary / binary / where -----------------------------------------------------------------
