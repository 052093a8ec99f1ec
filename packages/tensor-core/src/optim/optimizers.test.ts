import { describe, expect, it } from 'vitest';
import { ArgumentError, DTypeError } from '../errors.js';
import { createCpuBackend } from '../runtime.js';
import { Tensor } from '../tensor.js';
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
