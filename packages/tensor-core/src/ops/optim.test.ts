import { expect, it } from 'vitest';
import type { AdamHyper, SgdHyper } from '../backend/backend.js';
import { ArgumentError, DTypeError, ShapeError } from '../errors.js';
import { describeBackends, expectClose } from '../testing/index.js';
import { roundValues, seededValues } from '../testing/reference.js';
import { tensor } from './creation.js';
import { adamStep, axpy_, checkFinite, sgdStep } from './optim.js';

/** torch.optim.Adam/AdamW single-tensor step, float64. */
function adamReference(p: number[], g: number[], m: number[], v: number[], h: AdamHyper): void {
  for (let i = 0; i < p.length; i++) {
    let grad = g[i]! * h.gradScale;
    if (h.decoupled) p[i] = p[i]! * (1 - h.lr * h.weightDecay);
    else grad += h.weightDecay * p[i]!;
    m[i] = h.beta1 * m[i]! + (1 - h.beta1) * grad;
    v[i] = h.beta2 * v[i]! + (1 - h.beta2) * grad * grad;
    const bc1 = 1 - h.beta1 ** h.step;
    const bc2 = 1 - h.beta2 ** h.step;
    p[i] = p[i]! - (h.lr / bc1) * (m[i]! / (Math.sqrt(v[i]!) / Math.sqrt(bc2) + h.eps));
  }
}

describeBackends('fused optimizer kernels', (ctx) => {
  it('adamStep matches torch Adam and AdamW over three steps', async () => {
    for (const decoupled of [false, true]) {
      const n = 29;
      const p = roundValues(seededValues(n, 1), 'f32');
      const m = new Array<number>(n).fill(0);
      const v = new Array<number>(n).fill(0);
      const param = tensor(p, { backend: ctx.backend });
      const expAvg = tensor(m, { backend: ctx.backend });
      const expAvgSq = tensor(v, { backend: ctx.backend });
      for (let step = 1; step <= 3; step++) {
        const g = roundValues(seededValues(n, 10 + step), 'f32');
        const hyper: AdamHyper = {
          lr: 0.01,
          beta1: 0.9,
          beta2: 0.999,
          eps: 1e-8,
          weightDecay: 0.1,
          step,
          decoupled,
          gradScale: 0.5,
        };
        adamStep(param, tensor(g, { backend: ctx.backend }), expAvg, expAvgSq, hyper);
        adamReference(p, g, m, v, hyper);
      }
      expectClose(await param.read(), p, { rtol: 1e-5, atol: 1e-6 });
      expectClose(await expAvg.read(), m, { rtol: 1e-5, atol: 1e-6 });
      expectClose(await expAvgSq.read(), v, { rtol: 1e-5, atol: 1e-7 });
    }
  });

  it('adamStep takes a bf16 gradient', async () => {
    const g = roundValues([0.3, -0.7], 'bf16');
    const param = tensor([1, 2], { backend: ctx.backend });
    const hyper: AdamHyper = {
      lr: 0.1,
      beta1: 0.9,
      beta2: 0.99,
      eps: 1e-8,
      weightDecay: 0,
      step: 1,
      decoupled: false,
      gradScale: 1,
    };
    adamStep(
      param,
      tensor(g, { dtype: 'bf16', backend: ctx.backend }),
      tensor([0, 0], { backend: ctx.backend }),
      tensor([0, 0], { backend: ctx.backend }),
      hyper,
    );
    const p = [1, 2];
    adamReference(p, g, [0, 0], [0, 0], hyper);
    expectClose(await param.read(), p);
  });

  it('sgdStep matches torch SGD with momentum, dampening, Nesterov and weight decay', async () => {
    for (const nesterov of [false, true]) {
      const n = 13;
      const p = roundValues(seededValues(n, 2), 'f32');
      const buf = new Array<number>(n).fill(0);
      const param = tensor(p, { backend: ctx.backend });
      const momentumBuffer = tensor(buf, { backend: ctx.backend });
      for (let step = 1; step <= 3; step++) {
        const g = roundValues(seededValues(n, 20 + step), 'f32');
        const hyper: SgdHyper = {
          lr: 0.1,
          momentum: 0.9,
          dampening: nesterov ? 0 : 0.1,
          weightDecay: 0.01,
          nesterov,
          firstStep: step === 1,
          gradScale: 1,
        };
        sgdStep(param, tensor(g, { backend: ctx.backend }), momentumBuffer, hyper);
        for (let i = 0; i < n; i++) {
          let d = g[i]! + hyper.weightDecay * p[i]!;
          buf[i] = step === 1 ? d : hyper.momentum * buf[i]! + (1 - hyper.dampening) * d;
          d = nesterov ? d + hyper.momentum * buf[i]! : buf[i]!;
          p[i] = p[i]! - hyper.lr * d;
        }
      }
      expectClose(await param.read(), p, { rtol: 1e-5, atol: 1e-6 });
      expectClose(await momentumBuffer.read(), buf, { rtol: 1e-5, atol: 1e-6 });
    }
  });

  it('checkFinite raises a shared flag only for inf or NaN', async () => {
    const ok = tensor([1, 2, 3], { backend: ctx.backend });
    const flag = checkFinite([ok, tensor([0], { dtype: 'f16', backend: ctx.backend })]);
    expect(await flag.item()).toBe(0);
    checkFinite(tensor([1, Number.NaN], { backend: ctx.backend }), flag);
    expect(await flag.item()).toBe(1);
    checkFinite(ok, flag);
    expect(await flag.item()).toBe(1);
    expect(
      await checkFinite(tensor([Number.NEGATIVE_INFINITY], { backend: ctx.backend })).item(),
    ).toBe(1);
  });

  it('axpy_ adds alpha * x in place, rounding f16 once', async () => {
    const y = tensor([1, 2, 3], { dtype: 'f16', backend: ctx.backend });
    axpy_(y, -0.5, tensor([2, 2, 0.1], { backend: ctx.backend }));
    const expected = roundValues([1 - 1, 2 - 1, 3 - 0.5 * Math.fround(0.1)], 'f16');
    expect([...(await y.read())]).toEqual(expected);
  });

  it('rejects mismatched sizes, i32 state and missing momentum buffers', () => {
    const p = tensor([1, 2], { backend: ctx.backend });
    const hyper: AdamHyper = {
      lr: 0.1,
      beta1: 0.9,
      beta2: 0.99,
      eps: 1e-8,
      weightDecay: 0,
      step: 1,
      decoupled: false,
      gradScale: 1,
    };
    expect(() => adamStep(p, tensor([1], { backend: ctx.backend }), p, p, hyper)).toThrow(
      ShapeError,
    );
    const i = tensor(new Int32Array([0, 0]), { backend: ctx.backend });
    expect(() => adamStep(p, p, i, p, hyper)).toThrow(DTypeError);
    expect(() => adamStep(p, p, p, p, { ...hyper, step: 0 })).toThrow(
      '[adamStep] step 0 must be an integer >= 1',
    );
    expect(() =>
      sgdStep(p, p, null, {
        lr: 0.1,
        momentum: 0.9,
        dampening: 0,
        weightDecay: 0,
        nesterov: false,
        firstStep: true,
        gradScale: 1,
      }),
    ).toThrow(ArgumentError);
  });
});
