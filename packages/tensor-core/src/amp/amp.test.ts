import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { StateError } from '../errors.js';
import { Linear } from '../nn/layers.js';
import { mseLoss, sum, tensor } from '../ops/index.js';
import { Adam } from '../optim/adam.js';
import { SGD } from '../optim/sgd.js';
import { RandomGenerator } from '../random/generator.js';
import { createCpuBackend, setDefaultBackend } from '../runtime.js';
import type { Tensor } from '../tensor.js';
import { GradScaler } from './grad-scaler.js';
import { MixedPrecision } from './mixed-precision.js';

const backend = createCpuBackend();
beforeAll(() => setDefaultBackend(backend));
afterAll(() => setDefaultBackend(undefined));

function param(values: number[], grad: number[]): Tensor {
  const p = tensor(values);
  p.requiresGrad = true;
  p.grad = tensor(grad);
  return p;
}

async function values(t: Tensor | null): Promise<number[]> {
  return [...(await t!.read())];
}

describe('GradScaler', () => {
  it('scales the loss, and steps with the gradient divided by the scale', async () => {
    const scaler = new GradScaler({ initScale: 1024 });
    const w = tensor([1, 2]);
    w.requiresGrad = true;
    const loss = scaler.scale(sum(w));
    expect(await loss.item()).toBe(3 * 1024);
    await loss.backward();
    expect(await values(w.grad)).toEqual([1024, 1024]);
    const opt = new SGD([w], { lr: 0.5 });
    expect(await scaler.step(opt)).toBe(true);
    expect(await values(w)).toEqual([0.5, 1.5]);
    // Without unscale the 1/scale is fused into the update and `.grad` keeps the scaled values.
    expect(await values(w.grad)).toEqual([1024, 1024]);
    scaler.update();
    expect(scaler.getScale()).toBe(1024);
  });

  it('unscales in place once, then steps on the unscaled gradients', async () => {
    const scaler = new GradScaler({ initScale: 8 });
    const p = param([0, 0], [8, -16]);
    const opt = new SGD([p], { lr: 1 });
    const grad = p.grad;
    const copy = vi.spyOn(backend, 'copy');
    try {
      await scaler.unscale(opt);
      expect(copy).not.toHaveBeenCalled();
    } finally {
      copy.mockRestore();
    }
    expect(p.grad).toBe(grad);
    expect(await values(p.grad)).toEqual([1, -2]);
    await expect(scaler.unscale(opt)).rejects.toThrow(StateError);
    expect(await scaler.step(opt)).toBe(true);
    expect(await values(p)).toEqual([-1, 2]);
    await expect(scaler.step(opt)).rejects.toThrow(
      '[GradScaler.step] cannot go from stepped to stepped: step() was already called on this optimizer since the last update()',
    );
    scaler.update();
  });

  it('skips the step on inf or NaN and backs off; grows after growthIntervalSteps good steps', async () => {
    const scaler = new GradScaler({ initScale: 2 ** 10, growthIntervalSteps: 3 });
    const p = param([1, 1], [Number.POSITIVE_INFINITY, 1]);
    const opt = new Adam([p], { lr: 0.1 });
    expect(await scaler.step(opt)).toBe(false);
    expect(await values(p)).toEqual([1, 1]);
    expect(opt.state.size).toBe(0);
    scaler.update();
    expect(scaler.getScale()).toBe(2 ** 9);
    p.grad = tensor([Number.NaN, 0]);
    await scaler.unscale(opt);
    expect(await scaler.step(opt)).toBe(false);
    scaler.update();
    expect(scaler.getScale()).toBe(2 ** 8);
    p.grad = tensor([1, 1]);
    const scales: number[] = [];
    for (let i = 0; i < 4; i++) {
      expect(await scaler.step(opt)).toBe(true);
      scaler.update();
      scales.push(scaler.getScale());
    }
    expect(scales).toEqual([2 ** 8, 2 ** 8, 2 ** 9, 2 ** 9]);
    expect(scaler.stateDict()).toEqual({
      scale: 2 ** 9,
      growth_factor: 2,
      backoff_factor: 0.5,
      growth_interval: 3,
      _growth_tracker: 1,
    });
    expect(() => scaler.update()).toThrow(
      '[GradScaler.update] cannot go from ready to updated: no inf checks were recorded: call unscale() or step() before update()',
    );
  });

  it('agrees across ranks through reduceFoundInf', async () => {
    const seen: number[] = [];
    // This rank's gradients are finite, another rank's were not: the all-reduce says 1.
    const scaler = new GradScaler({
      initScale: 4,
      reduceFoundInf: async (local) => {
        seen.push(local);
        return Math.max(local, 1);
      },
    });
    const p = param([1], [4]);
    const opt = new SGD([p], { lr: 1 });
    expect(await scaler.step(opt)).toBe(false);
    expect(seen).toEqual([0]);
    expect(await values(p)).toEqual([1]);
    scaler.update();
    expect(scaler.getScale()).toBe(2);
  });

  it('is a pass-through when disabled', async () => {
    const scaler = new GradScaler({ enabled: false });
    const loss = tensor([2]);
    expect(scaler.scale(loss)).toBe(loss);
    const p = param([1], [1]);
    expect(await scaler.step(new SGD([p], { lr: 1 }))).toBe(true);
    expect(await values(p)).toEqual([0]);
    expect(scaler.getScale()).toBe(1);
  });
});

describe('MixedPrecision', () => {
  for (const dtype of ['bf16', 'f16'] as const) {
    it(`trains a ${dtype} copy of an f32 master: gradients match f32 within ${dtype} precision`, async () => {
      const make = () => new Linear(3, 2, { generator: new RandomGenerator(5) });
      const reference = make();
      const model = make();
      const masters = model.parameters();
      const mp = new MixedPrecision(model, { computeDType: dtype });
      expect(mp.masterParams()).toEqual(masters);
      expect(model.weight.dtype).toBe(dtype);
      expect(model.weight.requiresGrad).toBe(true);
      const x = [0.5, -1, 2, 1, 0.25, -0.5];
      const target = [0.1, 0.2, -0.3, 0.4];
      await mseLoss(
        reference.call(tensor(x, { shape: [2, 3] })),
        tensor(target, { shape: [2, 2] }),
      ).backward();
      const scaler = new GradScaler({ initScale: 256 });
      const out = model.call(tensor(x, { shape: [2, 3], dtype }));
      const loss = mseLoss(out, tensor(target, { shape: [2, 2], dtype }));
      await scaler.scale(loss).backward();
      mp.gradsToMasters();
      expect(model.weight.grad).toBeNull();
      const opt = new SGD(mp.masterParams(), { lr: 0.1 });
      const before = await values(masters[0]!);
      expect(await scaler.step(opt)).toBe(true);
      const expectedGrad = await values(reference.weight.grad);
      const after = await values(masters[0]!);
      const tolerance = dtype === 'bf16' ? 0.05 : 0.01;
      after.forEach((v, i) => {
        const grad = (before[i]! - v) / 0.1;
        expect(Math.abs(grad - expectedGrad[i]!)).toBeLessThan(
          tolerance * (1 + Math.abs(expectedGrad[i]!)),
        );
      });
      mp.mastersToCompute();
      expect(await values(model.weight)).toEqual(await values(tensor(after, { dtype })));
    });
  }

  it('lets an f16 overflow reach the scaler, which skips the step and backs off', async () => {
    const model = new Linear(2, 1, { generator: new RandomGenerator(1) });
    const mp = new MixedPrecision(model, { computeDType: 'f16' });
    const scaler = new GradScaler({ initScale: 2 ** 24 });
    const loss = sum(model.call(tensor([1000, 1000], { shape: [1, 2], dtype: 'f16' })));
    await scaler.scale(loss).backward();
    mp.gradsToMasters();
    const opt = new SGD(mp.masterParams(), { lr: 1 });
    const before = await values(mp.masterParams()[0]!);
    expect(await scaler.step(opt)).toBe(false);
    expect(await values(mp.masterParams()[0]!)).toEqual(before);
    scaler.update();
    expect(scaler.getScale()).toBe(2 ** 23);
  });
});
