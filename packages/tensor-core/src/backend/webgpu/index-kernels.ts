import { type Dense, ewLaunch, header } from './kernel-common.js';
import {
  elementwiseProgram,
  input,
  type Launch,
  linearDispatch,
  output,
  Params,
  type Program,
} from './program.js';
import { type RowBinding, rowLaunch, rowProgram } from './row-kernels.js';
import {
  CONVERT,
  declare,
  errorDecl,
  is16,
  linearIndex,
  loader,
  paramsDecl,
  rawLoader,
  storeAccess,
  storer,
} from './wgsl.js';

export const ERROR_CODE = { gather: 1, scatterAdd: 2, crossEntropy: 3, crossEntropyBackward: 4 };

/**
 * WGSL for cross entropy's row `row`: its target `t` (targets at prm[3], the ignore index at
 * prm[5]), whether it is ignored, and `tc`, the column to read, 0 after raising `code`'s error
 * for a target outside [0, cols).
 */
export function checkedTarget(code: number): string {
  return `let t = ld_t(prm[3] + row);
  let ignored = t == pi(5u);
  var tc = t;
  if (!ignored && (t < 0 || u32(t) >= cols)) {
    raise(${code}u, t, cols);
    tc = 0;
  }`;
}

export function crossEntropyLaunch(
  logits: Dense,
  targets: Dense,
  losses: Dense,
  ignoreIndex: number,
  rows: number,
  cols: number,
  backward: { dLosses: Dense; dLogits: Dense } | null,
): Launch {
  const bindings: RowBinding[] = [
    { name: 'x', t: logits, extent: logits.size, mode: 'read' },
    { name: 't', t: targets, extent: rows, mode: 'read' },
  ];
  if (backward) {
    bindings.push(
      { name: 'dl', t: backward.dLosses, extent: rows, mode: 'read' },
      { name: 'out', t: backward.dLogits, extent: backward.dLogits.size, mode: 'store' },
    );
  } else {
    bindings.push({ name: 'out', t: losses, extent: rows, mode: 'store' });
  }
  const code = backward ? ERROR_CODE.crossEntropyBackward : ERROR_CODE.crossEntropy;
  const params = new Params()
    .u(rows)
    .u(cols)
    .u(logits.offset)
    .u(targets.offset)
    .u(backward ? backward.dLogits.offset : losses.offset)
    .i(ignoreIndex)
    .u(backward ? backward.dLosses.offset : 0);
  const finish = backward
    ? `let ob = prm[4] + row * cols;
  if (ignored) {
    for (var c = 0u; c < cols; c++) { st_out(ob + c, 0.0); }
    return;
  }
  let scale = ld_dl(prm[6] + row) / s;
  for (var c = 0u; c < cols; c++) {
    let p = exp(ld_x(xb + c) - m) * scale;
    st_out(ob + c, select(p, p - ld_dl(prm[6] + row), c == u32(tc)));
  }`
    : `if (ignored) { st_out(prm[4] + row, 0.0); return; }
  st_out(prm[4] + row, m + log(s) - ld_x(xb + u32(tc)));`;
  const body = `let cols = prm[1];
  let xb = prm[2] + row * cols;
  ${checkedTarget(code)}
  var m = ld_x(xb);
  for (var c = 1u; c < cols; c++) { m = max(m, ld_x(xb + c)); }
  var s = 0.0;
  for (var c = 0u; c < cols; c++) { s += exp(ld_x(xb + c) - m); }
  ${finish}`;
  const program = rowProgram(
    backward ? 'crossEntropyBackward' : 'crossEntropy',
    '',
    bindings,
    body,
    true,
  );
  return rowLaunch(program, bindings, params, rows, true);
}

// ---- indexing ---------------------------------------------------------------------------------

export function gatherLaunch(
  table: Dense,
  indices: Dense,
  out: Dense,
  vocab: number,
  dim: number,
): Launch {
  const body = `fn outv(i: u32) -> u32 {
  let d = prm[5];
  let r = i / d;
  var id = ld_idx(prm[3] + r);
  if (id < 0 || u32(id) >= prm[4]) {
    raise(${ERROR_CODE.gather}u, id, prm[4]);
    id = 0;
  }
  return raw_table(prm[2] + u32(id) * d + i % d);
}`;
  const program = elementwiseProgram({
    name: 'gather',
    key: '',
    inputs: [
      { name: 'table', dtype: table.dtype },
      { name: 'idx', dtype: 'i32' },
    ],
    out: out.dtype,
    raw: true,
    body,
    usesError: true,
  });
  return ewLaunch(
    program,
    [table.dtype, 'i32', out.dtype],
    [input(table, table.size), input(indices, indices.size)],
    out,
    header(out).u(table.offset).u(indices.offset).u(vocab).u(dim),
    true,
  );
}

/**
 * Deterministic scatter-add: one invocation per column d walks the indices in order, so every
 * output element receives its contributions in index order, as the CPU backend adds them.
 */
export function scatterAddLaunch(
  src: Dense,
  indices: Dense,
  out: Dense,
  rows: number,
  vocab: number,
  dim: number,
): Launch {
  // A packed 16-bit output is atomic, so it is read with atomicLoad; otherwise through its loader.
  const ldOut = () =>
    !is16(out.dtype)
      ? 'ld_out(j)'
      : out.dtype === 'f16'
        ? 'f16_to_f32((atomicLoad(&out[j >> 1u]) >> ((j & 1u) << 4u)) & 0xffffu)'
        : 'bitcast<f32>(((atomicLoad(&out[j >> 1u]) >> ((j & 1u) << 4u)) & 0xffffu) << 16u)';
  const program: Program = {
    name: 'scatterAdd',
    key: `scatterAdd:${src.dtype}:${out.dtype}`,
    workgroupSize: [64, 1, 1],
    dispatch: (s) => linearDispatch(s[0] ?? 1, 64),
    wgsl: () => `${CONVERT}
${declare(0, 'src', src.dtype, 'read')}
${loader('src', src.dtype)}
${declare(1, 'idx', 'i32', 'read')}
${declare(2, 'out', out.dtype, storeAccess(out.dtype))}
${storer('out', out.dtype)}
${is16(out.dtype) ? '' : loader('out', out.dtype)}
${paramsDecl(3)}
${errorDecl(4)}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u) {
  let d = ${linearIndex(64)};
  let dim = prm[0];
  if (d >= dim) { return; }
  for (var r = 0u; r < prm[1]; r++) {
    let id = idx[prm[4] + r];
    if (id < 0 || u32(id) >= prm[2]) {
      if (d == 0u) { raise(${ERROR_CODE.scatterAdd}u, id, prm[2]); }
      continue;
    }
    let j = prm[5] + u32(id) * dim + d;
    st_out(j, ${ldOut()} + ld_src(prm[3] + r * dim + d));
  }
}`,
  };
  return {
    program,
    dtypes: [src.dtype, 'i32', out.dtype],
    bindings: [input(src, src.size), input(indices, rows), output(out, out.size)],
    params: new Params()
      .u(dim)
      .u(rows)
      .u(vocab)
      .u(src.offset)
      .u(indices.offset)
      .u(out.offset)
      .toArray(),
    shape: [dim],
    usesError: true,
  };
}

// ---- checks, optimizers ----------------------------------------------------------------------

export function checkFiniteLaunch(x: Dense, flag: Dense): Launch {
  const bits =
    x.dtype === 'f32'
      ? { mask: '0x7f800000u', raw: 'raw_x(prm[1] + i)' }
      : x.dtype === 'f16'
        ? { mask: '0x7c00u', raw: 'raw_x(prm[1] + i)' }
        : { mask: '0x7f80u', raw: 'raw_x(prm[1] + i)' };
  const program: Program = {
    name: 'checkFinite',
    key: `checkFinite:${x.dtype}`,
    workgroupSize: [64, 1, 1],
    dispatch: (s) => linearDispatch(s[0] ?? 1, 64),
    wgsl: () => `${declare(0, 'x', x.dtype, 'read')}
${rawLoader('x', x.dtype)}
${declare(1, 'flag', 'i32', 'read_write')}
${paramsDecl(2)}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u) {
  let i = ${linearIndex(64)};
  if (i >= prm[0]) { return; }
  if ((${bits.raw} & ${bits.mask}) == ${bits.mask}) { flag[prm[2]] = 1; }
}`,
  };
  return {
    program,
    dtypes: [x.dtype, 'i32'],
    bindings: [input(x, x.size), output(flag, 1)],
    params: new Params().u(x.size).u(x.offset).u(flag.offset).toArray(),
    shape: [x.size],
    usesError: false,
  };
}
