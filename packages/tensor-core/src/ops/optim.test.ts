import { expect, it } from 'vitest';
import type { AdamHyper, SgdHyper } from '../backend/backend.js';
import { ArgumentError, DTypeError, ShapeError } from '../errors.js';
import { describeBackends, expectClose } from '../testing/index.js';
import { roundValues, seededValues } from '../testing/reference.js';
import type { Tensor } from '../tensor.js';
import { tensor } from './creation.js';
import { adamStep, axpy_, checkFinite, sgdStep } from './optim.js';

/** torch.optim.Adam/AdamW single-tensor step, float64. */
/** Adam hyperparameters for the tests: AdamW at step 1 with a gradient scale, unless overridden. */
function adam(overrides: Partial<AdamHyper>): AdamHyper {
  return {
    lr: 0.01,
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
    weightDecay: 0.1,
    step: 1,
    decoupled: true,
    gradScale: 0.5,
    ...overrides,
  };
}

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
        const hyper = adam({ step, decoupled });
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
    const hyper = adam({ lr: 0.1, beta2: 0.99, weightDecay: 0, decoupled: false, gradScale: 1 });
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

  it('adamStep and sgdStep update views inside flat buffers and nothing around them (FSDP shards)', async () => {
    // A shard of 1000 elements (several workgroups) at offset 5 of a flat f32 parameter buffer;
    // expAvg and expAvgSq are two views of one flat state buffer; the gradient is a bf16 view at an
    // odd offset (packed halves on WebGPU). The same step on standalone tensors gives the same bits.
    const n = 1000;
    const sentinel = (count: number) => roundValues(seededValues(count, 99, 50, 60), 'f32');
    const adamHyper = (step: number) => adam({ step });
    const p0 = roundValues(seededValues(n, 41), 'f32');
    const grads = [1, 2].map((s) => roundValues(seededValues(n, 50 + s), 'bf16'));

    const paramFlat = tensor(sentinel(n + 9), { backend: ctx.backend });
    const stateFlat = tensor(sentinel(2 * n + 7), { backend: ctx.backend });
    const gradFlat = tensor(sentinel(n + 6), { dtype: 'bf16', backend: ctx.backend });
    const param = paramFlat.view([n], 5).write(p0);
    const expAvg = stateFlat.view([n], 2).write(new Array<number>(n).fill(0));
    const expAvgSq = stateFlat.view([n], n + 4).write(new Array<number>(n).fill(0));
    const grad = gradFlat.view([n], 3);
    const alone = {
      param: tensor(p0, { backend: ctx.backend }),
      expAvg: tensor(new Array<number>(n).fill(0), { backend: ctx.backend }),
      expAvgSq: tensor(new Array<number>(n).fill(0), { backend: ctx.backend }),
    };
    const p = [...p0];
    const m = new Array<number>(n).fill(0);
    const v = new Array<number>(n).fill(0);
    for (const [k, g] of grads.entries()) {
      grad.write(g);
      adamStep(param, grad, expAvg, expAvgSq, adamHyper(k + 1));
      const gAlone = tensor(g, { dtype: 'bf16', backend: ctx.backend });
      adamStep(alone.param, gAlone, alone.expAvg, alone.expAvgSq, adamHyper(k + 1));
      adamReference(p, g, m, v, adamHyper(k + 1));
    }
    expect([...(await param.read())]).toEqual([...(await alone.param.read())]);
    expect([...(await expAvg.read())]).toEqual([...(await alone.expAvg.read())]);
    expect([...(await expAvgSq.read())]).toEqual([...(await alone.expAvgSq.read())]);
    expectClose(await param.read(), p, { rtol: 1e-5, atol: 1e-6 });
    const untouched = async (flat: Tensor, inside: (i: number) => boolean) => {
      const before = sentinel(flat.size).map((x) => roundValues([x], flat.dtype)[0]!);
      const after = await flat.read();
      const changed = before.filter((x, i) => !inside(i) && after[i] !== x).length;
      expect(changed, `elements outside the views of a ${flat.dtype} flat buffer changed`).toBe(0);
    };
    await untouched(paramFlat, (i) => i >= 5 && i < 5 + n);
    await untouched(stateFlat, (i) => (i >= 2 && i < 2 + n) || (i >= n + 4 && i < 2 * n + 4));
    await untouched(gradFlat, (i) => i >= 3 && i < 3 + n);

    // SGD with momentum: the parameter and its momentum buffer share one flat buffer, with a gap
    // and back to back.
    const sgdHyper = (firstStep: boolean): SgdHyper => ({
      lr: 0.1,
      momentum: 0.9,
      dampening: 0,
      weightDecay: 0.01,
      nesterov: true,
      firstStep,
      gradScale: 1,
    });
    for (const gap of [2, 0]) {
      const flat = tensor(sentinel(2 * n + 11), { backend: ctx.backend });
      const sgdParam = flat.view([n], 7).write(p0);
      const buffer = flat.view([n], 7 + n + gap);
      const sgdAlone = tensor(p0, { backend: ctx.backend });
      const bufferAlone = tensor(new Array<number>(n).fill(0), { backend: ctx.backend });
      for (const [k, g] of grads.entries()) {
        grad.write(g);
        sgdStep(sgdParam, grad, buffer, sgdHyper(k === 0));
        sgdStep(
          sgdAlone,
          tensor(g, { dtype: 'bf16', backend: ctx.backend }),
          bufferAlone,
          sgdHyper(k === 0),
        );
      }
      expect([...(await sgdParam.read())], `gap ${gap}`).toEqual([...(await sgdAlone.read())]);
      expect([...(await buffer.read())], `gap ${gap}`).toEqual([...(await bufferAlone.read())]);
      await untouched(
        flat,
        (i) => (i >= 7 && i < 7 + n) || (i >= 7 + n + gap && i < 7 + 2 * n + gap),
      );
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
    const hyper = adam({ lr: 0.1, beta2: 0.99, weightDecay: 0, decoupled: false, gradScale: 1 });
    expect(() => adamStep(p, tensor([1], { backend: ctx.backend }), p, p, hyper)).toThrow(
      ShapeError,
    );
    const i = tensor(new Int32Array([0, 0]), { backend: ctx.backend });
    expect(() => adamStep(p, p, i, p, hyper)).toThrow(DTypeError);
    // The parameter and momentum buffer are f32 state (the WebGPU kernel updates f32 words).
    const half = tensor([1, 2], { dtype: 'f16', backend: ctx.backend });
    const sgdHyper: SgdHyper = {
      lr: 0.1,
      momentum: 0.9,
      dampening: 0,
      weightDecay: 0,
      nesterov: false,
      firstStep: true,
      gradScale: 1,
    };
    expect(() => sgdStep(half, p, p, sgdHyper)).toThrow(
      '[sgdStep] parameter must be f32 or f64 (dtypes f16)',
    );
    expect(() => sgdStep(p, p, half, sgdHyper)).toThrow(DTypeError);
    expect(() => adamStep(p, p, p, p, { ...hyper, step: 0 })).toThrow(
      '[adamStep] step 0 must be an integer >= 1',
    );
    expect(() => sgdStep(p, p, null, sgdHyper)).toThrow(ArgumentError);
  });
});
