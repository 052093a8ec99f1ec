// CPU kernels of the optimizers: the fused Adam/AdamW and SGD updates, in doubles, rounded
// once on store.
import type { AdamHyper, KernelTensor, SgdHyper } from '../backend.js';
import { inoutValues, readValues } from './cpu-storage.js';

export function adamKernel(
  param: KernelTensor,
  grad: KernelTensor,
  expAvg: KernelTensor,
  expAvgSq: KernelTensor,
  hyper: AdamHyper,
): void {
  const p = inoutValues(param);
  const g = readValues(grad);
  const m = inoutValues(expAvg);
  const v = inoutValues(expAvgSq);
  const { lr, beta1, beta2, eps, weightDecay, step, decoupled, gradScale } = hyper;
  const bias1 = 1 - beta1 ** step;
  const bias2Sqrt = Math.sqrt(1 - beta2 ** step);
  const stepSize = lr / bias1;
  const pv = p.values;
  const mv = m.values;
  const vv = v.values;
  for (let i = 0; i < pv.length; i++) {
    let param_ = pv[i]!;
    let gi = g[i]! * gradScale;
    if (weightDecay !== 0) {
      if (decoupled) param_ *= 1 - lr * weightDecay;
      else gi += weightDecay * param_;
    }
    const mi = beta1 * mv[i]! + (1 - beta1) * gi;
    const vi = beta2 * vv[i]! + (1 - beta2) * gi * gi;
    mv[i] = mi;
    vv[i] = vi;
    pv[i] = param_ - (stepSize * mi) / (Math.sqrt(vi) / bias2Sqrt + eps);
  }
  p.commit();
  m.commit();
  v.commit();
}

export function sgdKernel(
  param: KernelTensor,
  grad: KernelTensor,
  momentumBuffer: KernelTensor | null,
  hyper: SgdHyper,
): void {
  const p = inoutValues(param);
  const g = readValues(grad);
  const buf = momentumBuffer ? inoutValues(momentumBuffer) : null;
  const { lr, momentum, dampening, weightDecay, nesterov, firstStep, gradScale } = hyper;
  const pv = p.values;
  for (let i = 0; i < pv.length; i++) {
    let gi = g[i]! * gradScale;
    if (weightDecay !== 0) gi += weightDecay * pv[i]!;
    if (buf && momentum !== 0) {
      const b = firstStep ? gi : momentum * buf.values[i]! + (1 - dampening) * gi;
      buf.values[i] = b;
      gi = nesterov ? gi + momentum * b : b;
    }
    pv[i] = pv[i]! - lr * gi;
  }
  p.commit();
  buf?.commit();
}
