import { stridedExtent } from '../strided-layout.js';
import {
  broadcastStrides,
  coalesce,
  type Dense,
  ewLaunch,
  header,
  shapeSize,
  stridedIndexFn,
} from './kernel-common.js';
import {
  elementwiseProgram,
  input,
  type Launch,
  linearDispatch,
  type Operand,
  output,
  Params,
  type Program,
} from './program.js';
import {
  CONVERT,
  declare,
  linearIndex,
  paramsDecl,
  rawLoader,
  storeAccess,
  storer,
} from './wgsl.js';

export interface Strided extends Operand {
  readonly strides: readonly number[];
}

export function copyStridedLaunch(src: Strided, dst: Strided, shape: readonly number[]): Launch {
  const merged = coalesce(shape, [src.strides, dst.strides]);
  const rank = merged.shape.length;
  const size = shapeSize(shape);
  const srcExtent = stridedExtent(shape, src.strides);
  const dstExtent = stridedExtent(shape, dst.strides);
  const dstContiguous =
    rank === 1
      ? merged.strides[1]![0] === 1
      : merged.strides[1]!.every((v, d) => v === broadcastStrides(merged.shape, merged.shape)[d]);
  if (dstContiguous) {
    const out: Dense = { storage: dst.storage, offset: dst.offset, dtype: dst.dtype, size };
    const params = header(out).u(src.offset);
    const dimsAt = params.length;
    for (const d of merged.shape) params.u(d);
    const stridesAt = params.length;
    for (const v of merged.strides[0]!) params.u(v);
    const program = elementwiseProgram({
      name: 'copyStrided',
      key: `r${rank}`,
      inputs: [{ name: 'x', dtype: src.dtype }],
      out: dst.dtype,
      raw: true,
      body: `${stridedIndexFn('idx_x', rank, dimsAt, stridesAt)}
fn outv(i: u32) -> u32 { return raw_x(prm[2] + idx_x(i)); }`,
    });
    return ewLaunch(program, [src.dtype, dst.dtype], [input(src, srcExtent)], out, params);
  }
  // A scattered destination: one invocation per element; packed halves through atomics (`rst_`).
  const params = new Params().u(size).u(src.offset).u(dst.offset);
  const dimsAt = params.length;
  for (const d of merged.shape) params.u(d);
  const srcAt = params.length;
  for (const v of merged.strides[0]!) params.u(v);
  const dstAt = params.length;
  for (const v of merged.strides[1]!) params.u(v);
  const program: Program = {
    name: 'copyStridedScatter',
    key: `cs:r${rank}:${dst.dtype}`,
    workgroupSize: [64, 1, 1],
    dispatch: (s) => linearDispatch(s[0] ?? 1, 64),
    wgsl: () => `${CONVERT}
${declare(0, 'x', dst.dtype, 'read')}
${rawLoader('x', dst.dtype)}
${declare(1, 'out', dst.dtype, storeAccess(dst.dtype))}
${storer('out', dst.dtype)}
${paramsDecl(2)}
${stridedIndexFn('idx_x', rank, dimsAt, srcAt)}
${stridedIndexFn('idx_out', rank, dimsAt, dstAt)}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u) {
  let i = ${linearIndex(64)};
  if (i >= prm[0]) { return; }
  let v = raw_x(prm[1] + idx_x(i));
  rst_out(prm[2] + idx_out(i), v);
}`,
  };
  return {
    program,
    dtypes: [src.dtype, dst.dtype],
    bindings: [input(src, srcExtent), output(dst, dstExtent)],
    params: params.toArray(),
    shape: [size],
    usesError: false,
  };
}
