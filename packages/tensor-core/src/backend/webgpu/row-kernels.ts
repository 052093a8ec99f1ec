import type { Dense } from './kernel-common.js';
import {
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
  errorDecl,
  linearIndex,
  loader,
  MATH,
  paramsDecl,
  storeAccess,
  storer,
} from './wgsl.js';

export interface RowBinding {
  name: string;
  t: Operand;
  extent: number;
  mode: 'read' | 'store';
}

export function rowProgram(
  name: string,
  key: string,
  bindings: RowBinding[],
  body: string,
  usesError = false,
): Program {
  const dtypes = bindings.map((b) => b.t.dtype);
  return {
    name,
    key: `row:${name}:${key}:${dtypes.join(',')}`,
    workgroupSize: [64, 1, 1],
    dispatch: (s) => linearDispatch(s[0] ?? 1, 64),
    wgsl: () => {
      const lines = [CONVERT, MATH];
      bindings.forEach((b, k) => {
        if (b.mode === 'read') {
          lines.push(declare(k, b.name, b.t.dtype, 'read'), loader(b.name, b.t.dtype));
        } else {
          lines.push(
            declare(k, b.name, b.t.dtype, storeAccess(b.t.dtype)),
            storer(b.name, b.t.dtype),
          );
        }
      });
      lines.push(paramsDecl(bindings.length));
      if (usesError) lines.push(errorDecl(bindings.length + 1));
      lines.push(`@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u) {
  let row = ${linearIndex(64)};
  if (row >= prm[0]) { return; }
  ${body}
}`);
      return lines.join('\n');
    },
  };
}

export function rowLaunch(
  program: Program,
  bindings: RowBinding[],
  params: Params,
  rows: number,
  usesError = false,
): Launch {
  return {
    program,
    dtypes: bindings.map((b) => b.t.dtype),
    bindings: bindings.map((b) =>
      b.mode === 'read' ? input(b.t, b.extent) : output(b.t, b.extent),
    ),
    params: params.toArray(),
    shape: [rows],
    usesError,
  };
}

export function softmaxLaunch(
  x: Dense,
  out: Dense,
  rows: number,
  cols: number,
  log: boolean,
): Launch {
  const bindings: RowBinding[] = [
    { name: 'x', t: x, extent: x.size, mode: 'read' },
    { name: 'out', t: out, extent: out.size, mode: 'store' },
  ];
  const body = `let cols = prm[1];
  let xb = prm[2] + row * cols;
  let ob = prm[3] + row * cols;
  var m = ld_x(xb);
  for (var c = 1u; c < cols; c++) { m = max(m, ld_x(xb + c)); }
  var s = 0.0;
  for (var c = 0u; c < cols; c++) { s += exp(ld_x(xb + c) - m); }
  ${
    log
      ? 'let ls = log(s);\n  for (var c = 0u; c < cols; c++) { st_out(ob + c, ld_x(xb + c) - m - ls); }'
      : 'let r = 1.0 / s;\n  for (var c = 0u; c < cols; c++) { st_out(ob + c, exp(ld_x(xb + c) - m) * r); }'
  }`;
  const program = rowProgram('softmax', log ? 'log' : 'exp', bindings, body);
  return rowLaunch(program, bindings, new Params().u(rows).u(cols).u(x.offset).u(out.offset), rows);
}

export function layerNormLaunch(
  x: Dense,
  weight: Dense | null,
  bias: Dense | null,
  eps: number,
  out: Dense,
  mean: Dense,
  rstd: Dense,
  rows: number,
  cols: number,
): Launch {
  const bindings: RowBinding[] = [{ name: 'x', t: x, extent: x.size, mode: 'read' }];
  if (weight) bindings.push({ name: 'w', t: weight, extent: cols, mode: 'read' });
  if (bias) bindings.push({ name: 'b', t: bias, extent: cols, mode: 'read' });
  bindings.push(
    { name: 'out', t: out, extent: out.size, mode: 'store' },
    { name: 'mean', t: mean, extent: rows, mode: 'store' },
    { name: 'rstd', t: rstd, extent: rows, mode: 'store' },
  );
  const params = new Params()
    .u(rows)
    .u(cols)
    .u(x.offset)
    .u(out.offset)
    .u(mean.offset)
    .u(rstd.offset)
    .u(weight?.offset ?? 0)
    .u(bias?.offset ?? 0)
    .f(eps);
  const wExpr = weight ? ' * ld_w(prm[6] + c)' : '';
  const bExpr = bias ? ' + ld_b(prm[7] + c)' : '';
  const body = `let cols = prm[1];
  let xb = prm[2] + row * cols;
  var s = 0.0;
  for (var c = 0u; c < cols; c++) { s += ld_x(xb + c); }
  let mu = s / f32(cols);
  var v = 0.0;
  for (var c = 0u; c < cols; c++) { let d = ld_x(xb + c) - mu; v += d * d; }
  let r = inverseSqrt(v / f32(cols) + pf(8u));
  st_mean(prm[4] + row, mu);
  st_rstd(prm[5] + row, r);
  for (var c = 0u; c < cols; c++) { st_out(prm[3] + row * cols + c, (ld_x(xb + c) - mu) * r${wExpr}${bExpr}); }`;
  const program = rowProgram('layerNorm', `${!!weight}${!!bias}`, bindings, body);
  return rowLaunch(program, bindings, params, rows);
}

export function layerNormBackwardLaunches(
  dy: Dense,
  x: Dense,
  weight: Dense | null,
  mean: Dense,
  rstd: Dense,
  dx: Dense,
  dWeight: Dense | null,
  dBias: Dense | null,
  rows: number,
  cols: number,
): Launch[] {
  const launches: Launch[] = [];
  const common: RowBinding[] = [
    { name: 'dy', t: dy, extent: dy.size, mode: 'read' },
    { name: 'x', t: x, extent: x.size, mode: 'read' },
    { name: 'mean', t: mean, extent: rows, mode: 'read' },
    { name: 'rstd', t: rstd, extent: rows, mode: 'read' },
  ];
  const base = new Params()
    .u(rows)
    .u(cols)
    .u(dy.offset)
    .u(x.offset)
    .u(mean.offset)
    .u(rstd.offset)
    .u(weight?.offset ?? 0)
    .u(dx.offset);
  const bindings: RowBinding[] = [...common];
  if (weight) bindings.push({ name: 'w', t: weight, extent: cols, mode: 'read' });
  bindings.push({ name: 'dx', t: dx, extent: dx.size, mode: 'store' });
  const g = weight ? 'ld_dy(db + c) * ld_w(prm[6] + c)' : 'ld_dy(db + c)';
  const body = `let cols = prm[1];
  let db = prm[2] + row * cols;
  let xb = prm[3] + row * cols;
  let mu = ld_mean(prm[4] + row);
  let r = ld_rstd(prm[5] + row);
  var sg = 0.0;
  var sgx = 0.0;
  for (var c = 0u; c < cols; c++) {
    let gv = ${g};
    sg += gv;
    sgx += gv * (ld_x(xb + c) - mu) * r;
  }
  let mg = sg / f32(cols);
  let mgx = sgx / f32(cols);
  for (var c = 0u; c < cols; c++) {
    let gv = ${g};
    let xh = (ld_x(xb + c) - mu) * r;
    st_dx(prm[7] + row * cols + c, r * (gv - mg - xh * mgx));
  }`;
  launches.push(
    rowLaunch(rowProgram('layerNormBackward', `${!!weight}`, bindings, body), bindings, base, rows),
  );
  if (dWeight || dBias) {
    // Column sums: one invocation per column (the "row" index is the column here).
    const cb: RowBinding[] = [...common];
    if (dWeight) cb.push({ name: 'dw', t: dWeight, extent: cols, mode: 'store' });
    if (dBias) cb.push({ name: 'dbias', t: dBias, extent: cols, mode: 'store' });
    const params = new Params()
      .u(cols)
      .u(rows)
      .u(dy.offset)
      .u(x.offset)
      .u(mean.offset)
      .u(rstd.offset)
      .u(dWeight?.offset ?? 0)
      .u(dBias?.offset ?? 0);
    const colBody = `let c = row;
  let cols = prm[0];
  let rows = prm[1];
  var sw = 0.0;
  var sb = 0.0;
  for (var r = 0u; r < rows; r++) {
    let d = ld_dy(prm[2] + r * cols + c);
    sb += d;
    sw += d * (ld_x(prm[3] + r * cols + c) - ld_mean(prm[4] + r)) * ld_rstd(prm[5] + r);
  }
  ${dWeight ? 'st_dw(prm[6] + c, sw);' : ''}
  ${dBias ? 'st_dbias(prm[7] + c, sb);' : ''}`;
    launches.push(
      rowLaunch(
        rowProgram('layerNormParamGrads', `${!!dWeight}${!!dBias}`, cb, colBody),
        cb,
        params,
        cols,
      ),
    );
  }
  return launches;
}
