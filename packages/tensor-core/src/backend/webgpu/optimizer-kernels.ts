import type { DType } from '../../dtype.js';
import type { Dense } from './kernel-common.js';
import { input, type Launch, linearDispatch, output, Params, type Program } from './program.js';
import { CONVERT, declare, linearIndex, loader, paramsDecl } from './wgsl.js';

function optimizerProgram(
  name: string,
  key: string,
  grad: DType,
  states: string[],
  body: string,
): Program {
  return {
    name,
    key: `${name}:${key}:${grad}`,
    workgroupSize: [64, 1, 1],
    dispatch: (s) => linearDispatch(s[0] ?? 1, 64),
    wgsl: () => {
      const lines = [CONVERT, declare(0, 'grad', grad, 'read'), loader('grad', grad)];
      states.forEach((s, k) => {
        lines.push(declare(k + 1, s, 'f32', 'read_write'));
      });
      lines.push(paramsDecl(states.length + 1));
      lines.push(`@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u) {
  let i = ${linearIndex(64)};
  if (i >= prm[0]) { return; }
  ${body}
}`);
      return lines.join('\n');
    },
  };
}

export interface AdamScalars {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  decoupled: boolean;
  gradScale: number;
  biasCorrection1: number;
  biasCorrection2Sqrt: number;
}

export function adamLaunch(
  param: Dense,
  grad: Dense,
  expAvg: Dense,
  expAvgSq: Dense,
  h: AdamScalars,
): Launch {
  const body = `let pj = prm[1] + i;
  let mj = prm[3] + i;
  let vj = prm[4] + i;
  var p = param[pj];
  var gv = ld_grad(prm[2] + i) * pf(5u);
  ${h.decoupled ? 'p = p * (1.0 - pf(6u) * pf(9u));' : 'gv = gv + pf(9u) * p;'}
  let m = expAvg[mj] + (1.0 - pf(7u)) * (gv - expAvg[mj]);
  let v = expAvgSq[vj] * pf(8u) + (1.0 - pf(8u)) * gv * gv;
  expAvg[mj] = m;
  expAvgSq[vj] = v;
  let denom = sqrt(v) / pf(11u) + pf(12u);
  param[pj] = p - (pf(6u) / pf(10u)) * (m / denom);`;
  const program = optimizerProgram(
    'adam',
    h.decoupled ? 'w' : 'l2',
    grad.dtype,
    ['param', 'expAvg', 'expAvgSq'],
    body,
  );
  const params = new Params()
    .u(param.size)
    .u(param.offset)
    .u(grad.offset)
    .u(expAvg.offset)
    .u(expAvgSq.offset)
    .f(h.gradScale)
    .f(h.lr)
    .f(h.beta1)
    .f(h.beta2)
    .f(h.weightDecay)
    .f(h.biasCorrection1)
    .f(h.biasCorrection2Sqrt)
    .f(h.eps);
  return {
    program,
    dtypes: [grad.dtype, 'f32', 'f32', 'f32'],
    bindings: [
      input(grad, grad.size),
      output(param, param.size),
      output(expAvg, expAvg.size),
      output(expAvgSq, expAvgSq.size),
    ],
    params: params.toArray(),
    shape: [param.size],
    usesError: false,
  };
}

export interface SgdScalars {
  lr: number;
  momentum: number;
  dampening: number;
  weightDecay: number;
  nesterov: boolean;
  firstStep: boolean;
  gradScale: number;
}

export function sgdLaunch(param: Dense, grad: Dense, buffer: Dense | null, h: SgdScalars): Launch {
  const momentum = buffer !== null;
  const update = momentum
    ? `let b = ${h.firstStep ? 'gv' : 'pf(4u) * buf[prm[3] + i] + (1.0 - pf(5u)) * gv'};
  buf[prm[3] + i] = b;
  ${h.nesterov ? 'gv = gv + pf(4u) * b;' : 'gv = b;'}`
    : '';
  const body = `let pj = prm[1] + i;
  let p = param[pj];
  var gv = ld_grad(prm[2] + i) * pf(7u) + pf(6u) * p;
  ${update}
  param[pj] = p - pf(8u) * gv;`;
  const key = `${momentum}${h.firstStep}${h.nesterov}`;
  const program = optimizerProgram(
    'sgd',
    key,
    grad.dtype,
    momentum ? ['param', 'buf'] : ['param'],
    body,
  );
  const params = new Params()
    .u(param.size)
    .u(param.offset)
    .u(grad.offset)
    .u(buffer?.offset ?? 0)
    .f(h.momentum)
    .f(h.dampening)
    .f(h.weightDecay)
    .f(h.gradScale)
    .f(h.lr);
  const bindings = [input(grad, grad.size), output(param, param.size)];
  if (buffer) bindings.push(output(buffer, buffer.size));
  return {
    program,
    dtypes: momentum ? [grad.dtype, 'f32', 'f32'] : [grad.dtype, 'f32'],
    bindings,
    params: params.toArray(),
    shape: [param.size],
    usesError: false,
  };
}
