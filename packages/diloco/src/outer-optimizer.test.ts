import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { DilocoArgumentError } from './errors.js';
import { OuterOptimizer } from './outer-optimizer.js';
import { newSeed, randomValues } from './test-support/worlds.js';

/**
 * The paper's outer step, written out in float64 (Douillard et al. 2023, Algorithm 1, with
 * PyTorch's SGD(nesterov=True) as the OuterOpt): b1 = g1; b_t = mu b_(t-1) + g_t;
 * theta -= lr (g_t + mu b_t).
 */
function reference(
  theta0: Float32Array,
  grads: Float32Array[],
  lr: number,
  mu: number,
  nesterov: boolean,
) {
  const theta = Float64Array.from(theta0);
  let b: Float64Array | null = null;
  for (const g of grads) {
    if (mu === 0) {
      for (let i = 0; i < theta.length; i++) theta[i]! -= lr * g[i]!;
      continue;
    }
    if (b === null) b = Float64Array.from(g);
    else for (let i = 0; i < b.length; i++) b[i] = mu * b[i]! + g[i]!;
    for (let i = 0; i < theta.length; i++) {
      theta[i]! -= lr * (nesterov ? g[i]! + mu * b[i]! : b[i]!);
    }
  }
  return theta;
}

async function trajectory(seed: number, steps: number) {
  const theta0 = await randomValues(seed, 300);
  const grads = await Promise.all(
    Array.from({ length: steps }, (_, t) => randomValues(seed + 1 + t, 300, 0.1)),
  );
  return { theta0, grads };
}

describe('OuterOptimizer', () => {
  it.each([
    [0.7, 0.9, true],
    [0.5, 0.8, false],
    [1, 0, false],
  ])('lr %f momentum %f nesterov %s follows the float64 reference', async (lr, mu, nesterov) => {
    const seed = newSeed('outer optimizer');
    const { theta0, grads } = await trajectory(seed, 6);
    const outer = new OuterOptimizer({ lr, momentum: mu, nesterov });
    const theta = theta0.slice();
    for (const g of grads) outer.apply(theta, g);
    const expected = reference(theta0, grads, lr, mu, nesterov);
    for (let i = 0; i < theta.length; i++) {
      expect(Math.abs(theta[i]! - expected[i]!)).toBeLessThanOrEqual(
        1e-6 * (1 + Math.abs(expected[i]!)),
      );
    }
    expect(outer.step).toBe(6);
  });

  it('defaults to the paper: lr 0.7, momentum 0.9, Nesterov', () => {
    const outer = new OuterOptimizer();
    expect([outer.lr, outer.momentum, outer.nesterov]).toEqual([0.7, 0.9, true]);
  });

  it('its state dict resumes the same trajectory', async () => {
    const seed = newSeed('outer optimizer state');
    const { theta0, grads } = await trajectory(seed, 4);
    const a = new OuterOptimizer();
    const thetaA = theta0.slice();
    for (const g of grads) a.apply(thetaA, g);
    const b = new OuterOptimizer();
    const thetaB = theta0.slice();
    for (const g of grads.slice(0, 2)) b.apply(thetaB, g);
    const c = new OuterOptimizer();
    c.loadStateDict(b.stateDict());
    for (const g of grads.slice(2)) c.apply(thetaB, g);
    expect(thetaB).toEqual(thetaA);
    expect(c.step).toBe(4);
  });

  it('refuses bad hyperparameters with the option named', () => {
    expect(() => new OuterOptimizer({ lr: 0 })).toThrow(DilocoArgumentError);
    expect(() => new OuterOptimizer({ lr: -1 }, 2)).toThrow(
      '[OuterOptimizer] rank 2: the outer lr must be a positive number, got -1',
    );
    expect(() => new OuterOptimizer({ momentum: 1 })).toThrow(
      '[OuterOptimizer] rank -1: the outer momentum must be in [0, 1), got 1',
    );
    expect(() => new OuterOptimizer({ momentum: 0, nesterov: true })).toThrow(
      'Nesterov momentum needs a momentum above 0',
    );
  });
});

// PyTorch's torch.optim.SGD as the peer, where a Python with torch is at hand
// (WEBSHARD_TORCH_PYTHON, the repository's .venv-torch from `pnpm peers:torch`, python3, or Debian's
// python3-torch at /usr/bin/python3: SGD's arithmetic does not depend on the BLAS).
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
function torchPython(): string | null {
  const candidates = [
    process.env.WEBSHARD_TORCH_PYTHON,
    join(root, '.venv-torch', 'bin', 'python'),
    'python3',
    '/usr/bin/python3',
  ].filter((c): c is string => c !== undefined && c !== '' && (c === 'python3' || existsSync(c)));
  for (const python of candidates) {
    const probe = spawnSync(python, ['-c', 'import torch'], { encoding: 'utf8' });
    if (probe.status === 0) return python;
  }
  return null;
}
const python = torchPython();
if (python === null) {
  console.log(
    'outer-optimizer.test.ts: no Python with torch (run `pnpm peers:torch`): the PyTorch comparison is skipped',
  );
}

// Skipped only where no Python has torch (a machine without `pnpm peers:torch`): CI makes
// .venv-torch and runs it; where it cannot, the suite still passes, as the guide asks, and the
// paper's float64 reference above checks the outer step everywhere. Issue 34's note says so.
describe.skipIf(python === null)('OuterOptimizer against torch.optim.SGD', () => {
  it('Nesterov lr 0.7 momentum 0.9 over 6 steps', async () => {
    const seed = newSeed('outer optimizer vs torch');
    const { theta0, grads } = await trajectory(seed, 6);
    const script = [
      'import json, sys, torch',
      'data = json.load(sys.stdin)',
      'p = torch.nn.Parameter(torch.tensor(data["theta"], dtype=torch.float32))',
      'opt = torch.optim.SGD([p], lr=0.7, momentum=0.9, nesterov=True)',
      'for g in data["grads"]:',
      '    p.grad = torch.tensor(g, dtype=torch.float32)',
      '    opt.step()',
      'print(json.dumps(p.detach().tolist()))',
    ].join('\n');
    const run = spawnSync(python!, ['-c', script], {
      input: JSON.stringify({ theta: [...theta0], grads: grads.map((g) => [...g]) }),
      encoding: 'utf8',
    });
    expect(run.stderr).toBe('');
    const expected = JSON.parse(run.stdout) as number[];
    const outer = new OuterOptimizer();
    const theta = theta0.slice();
    for (const g of grads) outer.apply(theta, g);
    for (let i = 0; i < theta.length; i++) {
      expect(Math.abs(theta[i]! - expected[i]!)).toBeLessThanOrEqual(
        1e-6 * (1 + Math.abs(expected[i]!)),
      );
    }
  });
});
