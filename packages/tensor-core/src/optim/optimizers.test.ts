import { describe, expect, it } from 'vitest';
import { ArgumentError, DTypeError, FreedTensorError } from '../errors.js';
import { createCpuBackend } from '../runtime.js';
import { Tensor } from '../tensor.js';
import { describeBackends, expectClose as expectValuesClose } from '../testing/index.js';
import { Adam, AdamW } from './adam.js';
import { SGD } from './sgd.js';

/*
 * Expected values from PyTorch 1.13 in float64 (/usr/bin/python3):
 *   p = torch.tensor([0.5, -1.25, 2.0, 0.125], dtype=torch.float64, requires_grad=True)
 *   opt = OptimizerClass([p], **kw)
 *   for g in GRADS: p.grad = torch.tensor(g, dtype=torch.float64); opt.step()
 *   print(p.tolist())
 */
const GRADS = [
  [0.1, -0.2, 0.3, -0.4],
  [0.05, 0.5, -0.25, 0.0],
  [-0.3, 0.1, 0.2, 0.7],
];
const START = [0.5, -1.25, 2.0, 0.125];
const backend = createCpuBackend();

function param(values: number[] = START): Tensor {
  const p = Tensor.empty(backend, [values.length]).write(values);
  p.requiresGrad = true;
  return p;
}

function setGrad(p: Tensor, g: number[]): void {
  p.grad?.free();
  p.grad = Tensor.empty(backend, p.shape).write(g);
}

async function expectClose(t: Tensor, expected: number[], digits = 6): Promise<void> {
  const got = [...(await t.read())];
  expect(got.length).toBe(expected.length);
  got.forEach((v, i) => {
    expect(v).toBeCloseTo(expected[i]!, digits);
  });
}

async function run(make: (p: Tensor) => { step(): void }, steps = GRADS.length): Promise<Tensor> {
  const p = param();
  const opt = make(p);
  for (const g of GRADS.slice(0, steps)) {
    setGrad(p, g);
    opt.step();
  }
  return p;
}

describe('Adam and AdamW', () => {
  it('match PyTorch: Adam(lr=0.1, betas=(0.9, 0.99), eps=1e-3, weight_decay=0.1)', async () => {
    const p = await run(
      (p) => new Adam([p], { lr: 0.1, betas: [0.9, 0.99], eps: 1e-3, weightDecay: 0.1 }),
    );
    await expectClose(
      p,
      [0.31877372886949534, -1.1723862058053374, 1.768493971277325, 0.25372358075418694],
    );
  });

  it('match PyTorch: AdamW(lr=0.1, betas=(0.9, 0.99), eps=1e-3, weight_decay=0.1)', async () => {
    const p = await run(
      (p) => new AdamW([p], { lr: 0.1, betas: [0.9, 0.99], eps: 1e-3, weightDecay: 0.1 }),
    );
    await expectClose(
      p,
      [0.33126933081685417, -1.2041007621971784, 1.8074788098371841, 0.25563685676172565],
    );
  });

  it('has PyTorch defaults and gives each group its own hyperparameters', () => {
    const a = param();
    const b = param();
    const opt = new AdamW([{ params: [a] }, { params: [b], lr: 0.5, weightDecay: 0 }]);
    expect(opt.paramGroups.map((g) => [g.lr, g.betas, g.eps, g.weightDecay])).toEqual([
      [1e-3, [0.9, 0.999], 1e-8, 0.01],
      [0.5, [0.9, 0.999], 1e-8, 0],
    ]);
    expect(new Adam([a]).paramGroups[0]!.weightDecay).toBe(0);
  });

  it('skips parameters without a gradient and fuses a gradient scale', async () => {
    const a = param();
    const b = param();
    const opt = new Adam([a, b], { lr: 0.1 });
    setGrad(
      a,
      GRADS[0]!.map((g) => g * 1024),
    );
    opt.step({ gradScale: 1 / 1024 });
    // One Adam step moves each element by about lr * sign(g) (bias-corrected m / sqrt(v) = g / |g|).
    await expectClose(
      a,
      START.map((v, i) => v - 0.1 * Math.sign(GRADS[0]![i]!)),
      5,
    );
    await expectClose(b, START);
    expect(opt.state.has(b)).toBe(false);
    expect(opt.state.get(a)!.step).toBe(1);
  });

  it('saves and loads its state in PyTorch layout, and resumes identically', async () => {
    const kw = { lr: 0.1, betas: [0.9, 0.99] as [number, number], eps: 1e-3, weightDecay: 0.1 };
    const p = param();
    const opt = new AdamW([p], kw);
    setGrad(p, GRADS[0]!);
    opt.step();
    const dict = opt.stateDict();
    expect(Object.keys(dict.state)).toEqual(['0']);
    expect(dict.state[0]!.step).toBe(1);
    expect(dict.param_groups).toEqual([
      {
        lr: 0.1,
        betas: [0.9, 0.99],
        eps: 1e-3,
        weight_decay: 0.1,
        amsgrad: false,
        maximize: false,
        foreach: null,
        capturable: false,
        params: [0],
      },
    ]);
    // A fresh optimizer over a copy of the parameter, resumed from the dict.
    const q = Tensor.empty(backend, [4]).write(await p.read());
    q.requiresGrad = true;
    const resumed = new AdamW([q], { lr: 1 });
    await resumed.loadStateDict(dict);
    expect(resumed.paramGroups[0]!.lr).toBe(0.1);
    for (const g of GRADS.slice(1)) {
      setGrad(p, g);
      setGrad(q, g);
      opt.step();
      resumed.step();
    }
    expect([...(await q.read())]).toEqual([...(await p.read())]);
    await expectClose(
      q,
      [0.33126933081685417, -1.2041007621971784, 1.8074788098371841, 0.25563685676172565],
    );
  });

  it('rejects bad arguments with typed errors', async () => {
    const p = param();
    expect(() => new Adam([p], { lr: -1 })).toThrow(
      new ArgumentError('Adam', 'invalid learning rate -1'),
    );
    expect(() => new Adam([p], { betas: [1, 0.9] })).toThrow('[Adam] invalid beta1 1');
    expect(() => new Adam([])).toThrow('[optimizer] got an empty parameter list');
    expect(() => new Adam([{ params: [p] }, { params: [p] }])).toThrow(ArgumentError);
    const half = Tensor.empty(backend, [2], 'f16');
    expect(() => new AdamW([half])).toThrow(DTypeError);
    expect(() => new SGD([half], { lr: 0.1 })).toThrow(DTypeError);
    expect(() => new SGD([Tensor.empty(backend, [2], 'i32')], { lr: 0.1 })).toThrow(
      /\[SGD\] .*must be f32/,
    );
    const opt = new Adam([p]);
    await expect(
      opt.loadStateDict({ state: {}, param_groups: [{ params: [0, 1] }] }),
    ).rejects.toThrow(
      '[Adam.loadStateDict] parameter group 0 has 2 parameters in the state dict and 1 in the optimizer',
    );
  });
});

describe('SGD', () => {
  it('matches PyTorch: SGD(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.05)', async () => {
    const p = await run(
      (p) => new SGD([p], { lr: 0.1, momentum: 0.9, dampening: 0.1, weightDecay: 0.05 }),
    );
    await expectClose(p, [0.478293871875, -1.2573211559374997, 1.89087244, 0.16640501609375]);
  });

  it('matches PyTorch: SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.05)', async () => {
    const p = await run(
      (p) => new SGD([p], { lr: 0.1, momentum: 0.9, nesterov: true, weightDecay: 0.05 }),
    );
    await expectClose(
      p,
      [0.48971435656249995, -1.28597117378125, 1.847871991, 0.12251998932812501],
    );
  });

  it('matches PyTorch: plain SGD(lr=0.1)', async () => {
    const p = await run((p) => new SGD([p], { lr: 0.1 }));
    await expectClose(p, [0.515, -1.29, 1.975, 0.095]);
  });

  it('saves the momentum buffer and zeroes gradients both ways', async () => {
    const p = param();
    const opt = new SGD([p], { lr: 0.1, momentum: 0.9 });
    setGrad(p, GRADS[0]!);
    opt.step();
    const dict = opt.stateDict();
    await expectClose(dict.state[0]!.momentum_buffer as Tensor, GRADS[0]!);
    expect(dict.param_groups[0]).toMatchObject({
      lr: 0.1,
      momentum: 0.9,
      nesterov: false,
      params: [0],
    });
    opt.zeroGrad({ setToNone: false });
    await expectClose(p.grad!, [0, 0, 0, 0]);
    opt.zeroGrad();
    expect(p.grad).toBeNull();
    expect(() => new SGD([p], { lr: 0.1, nesterov: true })).toThrow(
      '[SGD] nesterov momentum needs a momentum and zero dampening',
    );
  });
});

/*
 * PyTorch's update formulas, by hand in float64 (torch/optim/sgd.py and adam.py / adamw.py,
 * single-tensor path): what the fused kernels must reproduce within f32 rounding.
 */
interface SgdReference {
  lr: number;
  momentum: number;
  dampening: number;
  weightDecay: number;
  nesterov: boolean;
}

/** One SGD step of PyTorch on `p` in place; `buf` is the momentum buffer (null before the first). */
function sgdReferenceStep(
  p: number[],
  g: readonly number[],
  buf: number[] | null,
  h: SgdReference,
): number[] | null {
  const d = g.map((gi, i) => gi + h.weightDecay * p[i]!);
  let next = buf;
  if (h.momentum !== 0) {
    next = buf === null ? [...d] : buf.map((b, i) => h.momentum * b + (1 - h.dampening) * d[i]!);
    for (let i = 0; i < d.length; i++) {
      d[i] = h.nesterov ? d[i]! + h.momentum * next[i]! : next[i]!;
    }
  }
  for (let i = 0; i < p.length; i++) p[i] = p[i]! - h.lr * d[i]!;
  return next;
}

interface AdamReference {
  lr: number;
  betas: [number, number];
  eps: number;
  weightDecay: number;
  decoupled: boolean;
}

/** One Adam / AdamW step of PyTorch (step t counts from 1) on `p`, `m`, `v` in place. */
function adamReferenceStep(
  p: number[],
  g: readonly number[],
  m: number[],
  v: number[],
  t: number,
  h: AdamReference,
): void {
  const [b1, b2] = h.betas;
  for (let i = 0; i < p.length; i++) {
    let grad = g[i]!;
    if (h.decoupled) p[i] = p[i]! * (1 - h.lr * h.weightDecay);
    else grad += h.weightDecay * p[i]!;
    m[i] = b1 * m[i]! + (1 - b1) * grad;
    v[i] = b2 * v[i]! + (1 - b2) * grad * grad;
    const stepSize = h.lr / (1 - b1 ** t);
    const denom = Math.sqrt(v[i]!) / Math.sqrt(1 - b2 ** t) + h.eps;
    p[i] = p[i]! - stepSize * (m[i]! / denom);
  }
}

/** f32-rounded values, as the parameters start and gradients arrive on a device. */
const f32 = (values: readonly number[]): number[] => values.map(Math.fround);

/** f32 kernels against the float64 formulas: a few f32 roundings per step. */
const F32_VS_F64 = { rtol: 1e-5, atol: 1e-6 };

describe('parameter groups with their own lr and weight decay, against the formulas', () => {
  const B = [-0.75, 1.5, 0.25, -2.0];
  const GRADS_B = [
    [0.2, 0.1, -0.3, 0.05],
    [-0.4, 0.25, 0.1, -0.2],
    [0.3, -0.6, 0.45, 0.15],
  ];

  it('SGD: each group its own lr and weight decay, a schedule changing one group', async () => {
    const defaults = { lr: 0.1, momentum: 0.9, dampening: 0.1, weightDecay: 0.05 };
    const a = param(START);
    const b = param(B);
    const opt = new SGD([{ params: [a] }, { params: [b], lr: 0.02, weightDecay: 0.5 }], defaults);
    const ha: SgdReference = { ...defaults, nesterov: false };
    const hb: SgdReference = { ...ha, lr: 0.02, weightDecay: 0.5 };
    const pa = f32(START);
    const pb = f32(B);
    let bufA: number[] | null = null;
    let bufB: number[] | null = null;
    for (let t = 0; t < 3; t++) {
      if (t === 2) {
        // A learning-rate schedule touching group 1 only.
        opt.paramGroups[1]!.lr = 0.005;
        hb.lr = 0.005;
      }
      setGrad(a, GRADS[t]!);
      setGrad(b, GRADS_B[t]!);
      opt.step();
      bufA = sgdReferenceStep(pa, f32(GRADS[t]!), bufA, ha);
      bufB = sgdReferenceStep(pb, f32(GRADS_B[t]!), bufB, hb);
    }
    expectValuesClose(await a.read(), pa, F32_VS_F64);
    expectValuesClose(await b.read(), pb, F32_VS_F64);
    expectValuesClose(await opt.state.get(b)!.momentumBuffer!.read(), bufB!, F32_VS_F64);
    // The groups really differ: b with group 0's hyperparameters ends elsewhere.
    const other = f32(B);
    let buf: number[] | null = null;
    for (let t = 0; t < 3; t++) buf = sgdReferenceStep(other, f32(GRADS_B[t]!), buf, ha);
    expect(Math.max(...other.map((v, i) => Math.abs(v - pb[i]!)))).toBeGreaterThan(0.01);
  });

  for (const decoupled of [false, true]) {
    const name = decoupled ? 'AdamW' : 'Adam';
    it(`${name}: each group its own lr and weight decay, a schedule changing one group`, async () => {
      const a = param(START);
      const b = param(B);
      const Make = decoupled ? AdamW : Adam;
      const defaults = { lr: 0.1, betas: [0.9, 0.99] as [number, number], eps: 1e-3 };
      const opt = new Make(
        [
          { params: [a], weightDecay: 0.1 },
          { params: [b], lr: 0.01, weightDecay: 0.5 },
        ],
        defaults,
      );
      const ha: AdamReference = { ...defaults, weightDecay: 0.1, decoupled };
      const hb: AdamReference = { ...defaults, lr: 0.01, weightDecay: 0.5, decoupled };
      const ref = [
        { p: f32(START), m: [0, 0, 0, 0], v: [0, 0, 0, 0], h: ha, grads: GRADS },
        { p: f32(B), m: [0, 0, 0, 0], v: [0, 0, 0, 0], h: hb, grads: GRADS_B },
      ];
      for (let t = 1; t <= 3; t++) {
        if (t === 3) {
          opt.paramGroups[0]!.lr = 0.05;
          ha.lr = 0.05;
        }
        setGrad(a, GRADS[t - 1]!);
        setGrad(b, GRADS_B[t - 1]!);
        opt.step();
        for (const r of ref) adamReferenceStep(r.p, f32(r.grads[t - 1]!), r.m, r.v, t, r.h);
      }
      for (const [i, p] of [a, b].entries()) {
        const r = ref[i]!;
        expectValuesClose(await p.read(), r.p, F32_VS_F64);
        expectValuesClose(await opt.state.get(p)!.expAvg.read(), r.m, F32_VS_F64);
        expectValuesClose(await opt.state.get(p)!.expAvgSq.read(), r.v, { rtol: 1e-5, atol: 1e-8 });
        expect(opt.state.get(p)!.step).toBe(3);
      }
      // The weight decay of group 1 matters: without it b ends elsewhere.
      const plain = { p: f32(B), m: [0, 0, 0, 0], v: [0, 0, 0, 0] };
      for (let t = 1; t <= 3; t++) {
        adamReferenceStep(plain.p, f32(GRADS_B[t - 1]!), plain.m, plain.v, t, {
          ...hb,
          weightDecay: 0,
        });
      }
      const moved = Math.max(...plain.p.map((v, i) => Math.abs(v - ref[1]!.p[i]!)));
      expect(moved).toBeGreaterThan(decoupled ? 1e-4 : 1e-3);
    });
  }
});

describe('SGD stateDict / loadStateDict', () => {
  it('continues after a save and load exactly as uninterrupted training', async () => {
    const starts = [START, [1.5, -0.5, 0.75], [0.3, -0.9]];
    const gradsAt = (t: number, k: number, n: number): number[] =>
      Array.from({ length: n }, (_, i) => Math.sin(t * 1.7 + k * 2.3 + i * 0.9) * 0.5);
    const kw = { lr: 0.05, momentum: 0.9, dampening: 0.1, weightDecay: 0.01 };
    const groups = (ps: Tensor[]) => [{ params: [ps[0]!, ps[1]!] }, { params: [ps[2]!], lr: 0.2 }];
    /** Step t: every parameter gets a gradient, except the last one before step 4. */
    const stepAt = (opt: SGD, ps: Tensor[], t: number): void => {
      ps.forEach((p, k) => {
        if (k === 2 && t < 4) {
          p.grad?.free();
          p.grad = null;
        } else setGrad(p, gradsAt(t, k, p.size));
      });
      opt.step();
    };

    const straight = starts.map((s) => param(s));
    const straightOpt = new SGD(groups(straight), kw);
    for (let t = 0; t < 7; t++) stepAt(straightOpt, straight, t);

    const first = starts.map((s) => param(s));
    const firstOpt = new SGD(groups(first), kw);
    for (let t = 0; t < 3; t++) stepAt(firstOpt, first, t);
    const dict = firstOpt.stateDict();
    // PyTorch's layout: indices through the groups; no state for a parameter never stepped.
    expect(Object.keys(dict.state)).toEqual(['0', '1']);
    expect(dict.param_groups.map((g) => [g.lr, g.weight_decay, g.params])).toEqual([
      [0.05, 0.01, [0, 1]],
      [0.2, 0.01, [2]],
    ]);

    // A fresh process: parameters copied, an optimizer made with other hyperparameters, loaded.
    const resumed = await Promise.all(first.map(async (p) => param([...(await p.read())])));
    const resumedOpt = new SGD(groups(resumed), { lr: 1, momentum: 0.5 });
    await resumedOpt.loadStateDict(dict);
    expect(resumedOpt.paramGroups.map((g) => [g.lr, g.momentum, g.dampening])).toEqual([
      [0.05, 0.9, 0.1],
      [0.2, 0.9, 0.1],
    ]);
    // The buffers were copied, not shared with the saved optimizer.
    expect(resumedOpt.state.get(resumed[0]!)!.momentumBuffer).not.toBe(
      firstOpt.state.get(first[0]!)!.momentumBuffer,
    );
    expect(resumedOpt.state.has(resumed[2]!)).toBe(false);
    for (let t = 3; t < 7; t++) stepAt(resumedOpt, resumed, t);
    for (const [k, p] of resumed.entries()) {
      expect([...(await p.read())]).toEqual([...(await straight[k]!.read())]);
      expect([...(await resumedOpt.state.get(p)!.momentumBuffer!.read())]).toEqual([
        ...(await straightOpt.state.get(straight[k]!)!.momentumBuffer!.read()),
      ]);
    }
  });
});

describeBackends('optimizers stepping on views into one flat buffer (FSDP shards)', (ctx) => {
  const makers: [string, (ps: Tensor[]) => { step(): void }][] = [
    ['SGD', (ps) => new SGD(ps, { lr: 0.1, momentum: 0.9, weightDecay: 0.05, nesterov: true })],
    ['Adam', (ps) => new Adam(ps, { lr: 0.1, betas: [0.9, 0.99], eps: 1e-3, weightDecay: 0.1 })],
    ['AdamW', (ps) => new AdamW(ps, { lr: 0.1, betas: [0.9, 0.99], eps: 1e-3, weightDecay: 0.1 })],
  ];
  for (const [name, make] of makers) {
    it(`${name} updates only the views, as it updates standalone tensors`, async () => {
      const b = ctx.backend;
      const sentinel = Array.from({ length: 17 }, (_, i) => 100 + i);
      // Parameters at offsets 3 ([2, 2]) and 10 ([3]); their gradients at other nonzero offsets
      // of a flat gradient buffer (a reduce-scatter's output).
      const flat = Tensor.empty(b, [17]).write(sentinel);
      const gradFlat = Tensor.empty(b, [17]).write(sentinel.map((v) => -v));
      const layout = [
        { shape: [2, 2], offset: 3, gradOffset: 1, start: [0.5, -1.25, 2.0, 0.125] },
        { shape: [3], offset: 10, gradOffset: 12, start: [-0.75, 1.5, 0.25] },
      ];
      const views = layout.map((l) => {
        const p = flat.view(l.shape, l.offset).write(l.start);
        p.requiresGrad = true;
        p.grad = gradFlat.view(l.shape, l.gradOffset);
        return p;
      });
      const alone = layout.map((l) => {
        const p = Tensor.empty(b, l.shape).write(l.start);
        p.requiresGrad = true;
        return p;
      });
      const opts = [make(views), make(alone)];
      for (let t = 0; t < 3; t++) {
        for (const [k, l] of layout.entries()) {
          const g = Array.from({ length: l.start.length }, (_, i) => Math.cos(t + k * 3 + i) * 0.4);
          views[k]!.grad!.write(g);
          alone[k]!.grad?.free();
          alone[k]!.grad = Tensor.empty(b, l.shape).write(g);
        }
        for (const opt of opts) opt.step();
      }
      const after = [...(await flat.read())];
      const inside = new Set(layout.flatMap((l) => l.start.map((_, i) => l.offset + i)));
      for (let i = 0; i < after.length; i++) {
        if (!inside.has(i)) expect(after[i], `element ${i} outside the views`).toBe(sentinel[i]);
      }
      for (const [k, l] of layout.entries()) {
        const got = [...(await views[k]!.read())];
        expect(got).toEqual([...(await alone[k]!.read())]);
        expect(got.some((v, i) => v !== Math.fround(l.start[i]!))).toBe(true);
      }
      // Gradients are read, never written (as PyTorch, weight decay does not touch .grad).
      for (const [k, l] of layout.entries()) {
        const last = Array.from(
          { length: l.start.length },
          (_, i) => Math.cos(2 + k * 3 + i) * 0.4,
        );
        expect([...(await views[k]!.grad!.read())]).toEqual(f32(last));
      }
      const grads = [...(await gradFlat.read())];
      const gradInside = new Set(layout.flatMap((l) => l.start.map((_, i) => l.gradOffset + i)));
      for (let i = 0; i < grads.length; i++) {
        if (!gradInside.has(i)) expect(grads[i]).toBe(-sentinel[i]!);
      }
    });
  }
});

describe('managed parameters', () => {
  it('an optimizer refuses a parameter a sharding wrapper manages, with its reason', async () => {
    const { SGD, tensor } = await import('../index.js');
    const { markManagedParameter } = await import('../entries/autograd.js');
    const p = tensor([1, 2], { backend: createCpuBackend() });
    p.requiresGrad = true;
    p.name = 'layer.weight';
    markManagedParameter(p, 'is sharded: step the shards instead');
    expect(() => new SGD([p], { lr: 0.1 })).toThrow(
      '[SGD] parameter layer.weight is sharded: step the shards instead',
    );
  });
});

describe('gradients that do not fit their parameter', () => {
  for (const make of ['Adam', 'AdamW', 'SGD'] as const) {
    it(`${make}: a typed error naming the parameter, before any parameter changes`, async () => {
      const { Adam, AdamW, SGD, tensor } = await import('../index.js');
      const backend = createCpuBackend();
      const good = tensor([1, 2, 3], { backend });
      good.name = 'good';
      good.requiresGrad = true;
      good.grad = tensor([0.1, 0.1, 0.1], { backend });
      const bad = tensor([1, 2, 3, 4, 5, 6], { backend });
      bad.name = 'flat_param_0';
      bad.requiresGrad = true;
      bad.grad = tensor([1, 1, 1], { backend });
      const optimizer =
        make === 'SGD'
          ? new SGD([good, bad], { lr: 0.1 })
          : new (make === 'Adam' ? Adam : AdamW)([good, bad], { lr: 0.1 });
      expect(() => optimizer.step()).toThrow(
        `[${make}] the gradient of parameter flat_param_0 does not have its shape (shapes [6] and [3])`,
      );
      expect([...(await good.read())]).toEqual([1, 2, 3]);
      bad.grad = tensor([1, 1, 1, 1, 1, 1], { backend: createCpuBackend() });
      expect(() => optimizer.step()).toThrow(
        'is on cpu, the parameter on cpu (another backend instance)',
      );
      bad.grad.free();
      expect(() => optimizer.step()).toThrow(FreedTensorError);
    });
  }
});
