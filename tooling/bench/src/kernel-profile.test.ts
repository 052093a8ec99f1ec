import { describe, expect, it } from 'vitest';
import {
  formatProfile,
  KernelProfile,
  kernelKey,
  kernelWork,
  profileKernels,
} from './kernel-profile.js';

const t = (shape: number[], dtype = 'f32') => ({ shape, dtype, storage: {}, offset: 0 });

describe('kernelWork', () => {
  it("counts a linear layer's matmuls as matmul, 2 M N K FLOPs, its weight gradient too", () => {
    // x [4, 256, 768] @ W^T, W [1, 2304, 768] (transposeB) -> [4, 256, 2304]
    const forward = kernelWork(
      'matmul',
      [t([4, 256, 768]), t([1, 2304, 768]), t([4, 256, 2304]), false, true],
      256,
    );
    expect(forward).toEqual({
      category: 'matmul',
      flops: 2 * 4 * 256 * 2304 * 768,
      bytes: 4 * (4 * 256 * 768 + 2304 * 768 + 4 * 256 * 2304),
    });
    // dW per sequence: x^T [4, 768, 256] (transposeA) @ dy [4, 256, 768] -> [4, 768, 768]
    const weightGradient = kernelWork(
      'matmul',
      [t([4, 256, 768]), t([4, 256, 768]), t([4, 768, 768]), true, false],
      256,
    );
    expect(weightGradient.category).toBe('matmul');
    expect(weightGradient.flops).toBe(2 * 4 * 768 * 768 * 256);
  });

  it("counts a matmul with a T x T operand or output as attention's, K from A's transposed shape", () => {
    // scores: q [48, 256, 64] @ k^T -> [48, 256, 256]
    const scores = [t([48, 256, 64]), t([48, 256, 64]), t([48, 256, 256]), false, true];
    expect(kernelWork('matmul', scores, 256).category).toBe('attention');
    // dK = dScores^T @ Q: dScores [48, 256, 256] transposed (A is [B, K, M]), Q [48, 256, 64]
    const dk = [t([48, 256, 256]), t([48, 256, 64]), t([48, 256, 64]), true, false];
    expect(kernelWork('matmul', dk, 256)).toEqual({
      category: 'attention',
      flops: 2 * 48 * 256 * 64 * 256,
      bytes: 4 * (48 * 256 * 256 + 2 * 48 * 256 * 64),
    });
    // without the sequence length, every matmul is a matmul
    expect(kernelWork('matmul', dk).category).toBe('matmul');
  });

  it('sorts GELU out of the element-wise ops, and counts bytes by dtype', () => {
    expect(kernelWork('unary', ['gelu', t([4, 8]), t([4, 8])])).toEqual({
      category: 'GELU',
      flops: 0,
      bytes: 256,
    });
    expect(kernelWork('binary', ['geluGrad', t([4, 8]), t([4, 8]), t([4, 8])]).category).toBe(
      'GELU',
    );
    expect(kernelWork('binary', ['add', t([4, 8], 'f16'), 1, t([4, 8], 'f16')])).toEqual({
      category: 'element-wise',
      flops: 0,
      bytes: 128,
    });
  });

  it('names the categories of the other kernels', () => {
    const cases: [string, string][] = [
      ['softmax', 'softmax'],
      ['layerNormBackward', 'layer norm'],
      ['gather', 'embedding'],
      ['scatterAdd', 'embedding'],
      ['crossEntropyBackward', 'loss'],
      ['adam', 'optimizer'],
      ['copyStrided', 'copies'],
      ['cast', 'copies'],
      ['allocate', 'allocation'],
      ['where', 'attention'],
      ['reduce', 'reductions'],
      ['randomNormal', 'other'],
    ];
    for (const [method, category] of cases) expect(kernelWork(method, []).category).toBe(category);
  });
});

describe('profileKernels', () => {
  /** A fake backend: one kernel that calls another (timed once), a getter on a private field. */
  class FakeBackend {
    #name = 'fake';
    calls: string[] = [];
    get description(): string {
      return this.#name;
    }
    copy(_src: unknown, _out: unknown): void {
      this.calls.push('copy');
    }
    matmul(a: unknown, _b: unknown, out: unknown): void {
      this.copy(a, out);
      this.calls.push('matmul');
    }
    startThreads(): number {
      return this.#name.length;
    }
  }

  it('times each kernel call once through a clock, with its work, and leaves the rest alone', () => {
    let clock = 0;
    const fake = new FakeBackend();
    const { backend, profile } = profileKernels(fake, { now: () => (clock += 5) });
    expect(backend.description).toBe('fake');
    expect(backend.startThreads()).toBe(4);
    backend.matmul(t([1, 2, 3]), t([1, 3, 4]), t([1, 2, 4]));
    backend.copy(t([8]), t([8]));
    expect(fake.calls).toEqual(['copy', 'matmul', 'copy']);
    expect(profile.totals.get('matmul')).toEqual({
      calls: 1,
      ms: 5,
      flops: 2 * 2 * 4 * 3,
      bytes: 4 * (6 + 12 + 8),
    });
    expect(profile.totals.get('copies')).toEqual({ calls: 1, ms: 5, flops: 0, bytes: 64 });
    expect(profile.kernelMs()).toBe(10);
    profile.reset();
    expect(profile.kernelMs()).toBe(0);
  });

  it('keeps each kernel by method, op and shapes, the costliest first (WEBSHARD_PROFILE_TOP)', () => {
    let clock = 0;
    const fake = new FakeBackend();
    const { backend, profile } = profileKernels(fake, { now: () => (clock += 5) });
    backend.copy(t([8]), t([8]));
    for (let i = 0; i < 2; i++) backend.matmul(t([1, 2, 3]), t([1, 3, 4]), t([1, 2, 4]));
    expect(kernelKey('binary', ['mul', t([2, 3]), 0.125, t([2, 3])])).toBe(
      'binary mul [2, 3] [2, 3]',
    );
    // Two steps: per step, the matmul's one call of 5 ms before the copy's half call.
    expect(profile.topKernels(2, 2).split('\n')).toEqual([
      '| kernel (method, op, operand shapes) | calls a step | ms a step |',
      '| --- | --- | --- |',
      '| matmul [1, 2, 3] [1, 3, 4] [1, 2, 4] | 1 | 5.00 |',
      '| copy [8] [8] | 1 | 2.50 |',
    ]);
    profile.reset();
    expect(profile.kernels.size).toBe(0);
  });
});

describe('formatProfile', () => {
  it('prints ms a step, the share, GFLOP/s or GB/s against the ceilings, and the rest', () => {
    const profile = new KernelProfile();
    // Two steps: 2e9 FLOPs of matmul in 40 ms, 1e8 bytes of copies in 20 ms.
    profile.add({ category: 'matmul', flops: 1e9, bytes: 0 }, 20);
    profile.add({ category: 'matmul', flops: 1e9, bytes: 0 }, 20);
    profile.add({ category: 'copies', flops: 0, bytes: 1e8 }, 20);
    const lines = formatProfile(profile, 50, 2, { gflops: 100, gbPerS: 10 }).split('\n');
    expect(lines[0]).toBe(
      '| part of the step | calls | ms a step | share | rate | of the ceiling |',
    );
    expect(lines[2]).toBe('| matmul | 1 | 20.00 | 40.0 % | 50.0 GFLOP/s | 50 % |');
    expect(lines[3]).toBe('| copies | 1 | 10.00 | 20.0 % | 5.00 GB/s | 50 % |');
    expect(lines[4]).toBe(
      '| outside kernels (autograd, ops layer, JavaScript) | - | 20.00 | 40.0 % | - | - |',
    );
    expect(lines[5]).toBe('| the step | - | 50.00 | 100 % | - | - |');
  });
});
