import type { AdamHyper, Backend, KernelTensor, SgdHyper } from '../backend/backend.js';
import { ArgumentError, ShapeError } from '../errors.js';
import { Tensor } from '../tensor.js';
import { backendOf, requireDType, requireFloat } from './validate.js';

function requireSameSize(op: string, tensors: readonly (Tensor | null)[]): void {
  const present = tensors.filter((t): t is Tensor => t !== null);
  const size = present[0]!.size;
  if (present.some((t) => t.size !== size)) {
    throw new ShapeError(
      op,
      present.map((t) => t.shape),
      'operands must have the same element count',
    );
  }
}

function requireHyper(op: string, hyper: object): void {
  for (const [key, value] of Object.entries(hyper)) {
    if (typeof value === 'number' && !Number.isFinite(value)) {
      throw new ArgumentError(op, `hyperparameter ${key} = ${value} is not finite`);
    }
  }
}

/**
 * One fused Adam/AdamW step in place over flat buffers (PyTorch's formulas): param, expAvg and
 * expAvgSq are f32 (f64 on the CPU), grad any float dtype, all of one element count. Not recorded.
 */
export function adamStep(
  param: Tensor,
  grad: Tensor,
  expAvg: Tensor,
  expAvgSq: Tensor,
  hyper: AdamHyper,
): void {
  backendOf('adamStep', [param, grad, expAvg, expAvgSq]);
  for (const t of [param, expAvg, expAvgSq]) requireDType('adamStep', t, ['f32', 'f64'], 'state');
  requireFloat('adamStep', grad);
  requireSameSize('adamStep', [param, grad, expAvg, expAvgSq]);
  requireHyper('adamStep', hyper);
  if (!Number.isInteger(hyper.step) || hyper.step < 1) {
    throw new ArgumentError('adamStep', `step ${hyper.step} must be an integer >= 1`);
  }
  if (param.size === 0) return;
  applyAdam(adamOperands('adamStep', param, grad, { expAvg, expAvgSq }), hyper);
}

/**
 * The one way to the backend's fused Adam kernel, for `adamStep` and the `Adam`/`AdamW`
 * optimizers: the caller has checked the operands, and `adamOperands` names it as `op` in a
 * freed-tensor error. The update rule itself is the backend's (one kernel per backend).
 */
export function applyAdam(operands: AdamOperands, hyper: AdamHyper): void {
  operands.backend.adam(operands.param, operands.grad, operands.expAvg, operands.expAvgSq, hyper);
}

/** The kernel operands of one Adam update, taken once so a host step can reuse them. */
export interface AdamOperands {
  readonly backend: Backend;
  readonly param: KernelTensor;
  readonly grad: KernelTensor;
  readonly expAvg: KernelTensor;
  readonly expAvgSq: KernelTensor;
}

export function adamOperands(
  op: string,
  param: Tensor,
  grad: Tensor,
  state: { expAvg: Tensor; expAvgSq: Tensor },
): AdamOperands {
  return {
    backend: param.backend,
    param: param.kernel(op),
    grad: grad.kernel(op),
    expAvg: state.expAvg.kernel(op),
    expAvgSq: state.expAvgSq.kernel(op),
  };
}

/**
 * One fused SGD (momentum, dampening, Nesterov, weight decay) step in place over flat buffers:
 * param and momentumBuffer are f32 (f64 on the CPU), grad any float dtype. Not recorded.
 */
export function sgdStep(
  param: Tensor,
  grad: Tensor,
  momentumBuffer: Tensor | null,
  hyper: SgdHyper,
): void {
  backendOf('sgdStep', [param, grad, momentumBuffer]);
  requireDType('sgdStep', param, ['f32', 'f64'], 'parameter');
  requireFloat('sgdStep', grad);
  if (momentumBuffer) requireDType('sgdStep', momentumBuffer, ['f32', 'f64'], 'momentum buffer');
  requireSameSize('sgdStep', [param, grad, momentumBuffer]);
  requireHyper('sgdStep', hyper);
  if (hyper.momentum !== 0 && momentumBuffer === null) {
    throw new ArgumentError('sgdStep', `momentum ${hyper.momentum} needs a momentum buffer`);
  }
  if (param.size === 0) return;
  applySgd('sgdStep', param, grad, momentumBuffer, hyper);
}

/**
 * The way to the backend's fused SGD kernel for `sgdStep` (the `SGD` optimizer calls it in a host step): the
 * caller has checked the operands (`applyAdam` says more).
 */
export function applySgd(
  op: string,
  param: Tensor,
  grad: Tensor,
  momentumBuffer: Tensor | null,
  hyper: SgdHyper,
): void {
  param.backend.sgd(param.kernel(op), grad.kernel(op), momentumBuffer?.kernel(op) ?? null, hyper);
}

/**
 * Set `flag` (i32 [1], created as 0 when not given) to 1 if any element of the tensors is inf
 * or NaN. Returns the flag; read it once for all checks (one sync, as a grad scaler does).
 */
export function checkFinite(tensors: Tensor | readonly Tensor[], flag?: Tensor): Tensor {
  const list = Array.isArray(tensors) ? (tensors as readonly Tensor[]) : [tensors as Tensor];
  const backend = backendOf('checkFinite', [...list, flag]);
  if (flag) {
    requireDType('checkFinite', flag, ['i32'], 'flag');
    if (flag.size !== 1)
      throw new ShapeError('checkFinite', [flag.shape], 'flag must have one element');
  }
  for (const t of list) requireFloat('checkFinite', t);
  const out = flag ?? Tensor.empty(backend, [1], 'i32');
  if (!flag) backend.fill(out.kernel('checkFinite'), 0);
  for (const t of list) {
    if (t.size > 0) backend.checkFinite(t.kernel('checkFinite'), out.kernel('checkFinite'));
  }
  return out;
}

/** y += alpha * x in place (same element count, float dtypes). Not recorded. */
export function axpy_(y: Tensor, alpha: number, x: Tensor): Tensor {
  const backend = backendOf('axpy_', [y, x]);
  requireFloat('axpy_', y);
  requireFloat('axpy_', x);
  requireSameSize('axpy_', [y, x]);
  if (y.size > 0) backend.axpy(alpha, x.kernel('axpy_'), y.kernel('axpy_'));
  return y;
}
