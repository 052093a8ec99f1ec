import { describe, expect, it } from 'vitest';
import type { KernelTensor } from '../backend.js';
import { CpuBackend } from './cpu-backend.js';

/** Cross entropy and its gradient on a backend, through the kernel contract. */
async function run(
  backend: CpuBackend,
  logits: Float32Array,
  targets: Int32Array,
  dLosses: Float32Array,
  classes: number,
  ignoreIndex = -100,
): Promise<{ losses: Float32Array; grad: Float32Array }> {
  const rows = targets.length;
  const make = (dtype: 'f32' | 'i32', shape: number[], data?: Float32Array | Int32Array) => {
    const t: KernelTensor = {
      storage: backend.allocate(shape.reduce((a, b) => a * b, 1) * 4),
      offset: 0,
      dtype,
      shape,
    };
    if (data) backend.write(t, data);
    return t;
  };
  const x = make('f32', [rows, classes], logits);
  const t = make('i32', [rows], targets);
  const losses = make('f32', [rows]);
  const dl = make('f32', [rows], dLosses);
  const dx = make('f32', [rows, classes]);
  backend.crossEntropy(x, t, losses, ignoreIndex);
  backend.crossEntropyBackward(x, t, dl, dx, ignoreIndex);
  return {
    losses: (await backend.read(losses)) as Float32Array,
    grad: (await backend.read(dx)) as Float32Array,
  };
}

function randomLogits(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return (s / 2 ** 32) * 8 - 4;
  });
}

describe('cross entropy through the WASM softmax', () => {
  const wasm = new CpuBackend();
  const typescript = new CpuBackend({ kernels: 'typescript' });

  it('matches the TypeScript kernels at GPT-2 vocabulary width, across forward blocks, with ignored, underflowed and non-finite rows', async () => {
    expect(wasm.kernels).toBe('wasm-simd');
    const classes = 50304;
    const rows = 170; // 83 rows a 16 MiB block at this width: three blocks
    const logits = randomLogits(rows * classes, 7);
    const targets = Int32Array.from({ length: rows }, (_, r) => (r * 7919) % classes);
    targets[5] = -100; // ignored
    logits[9 * classes + targets[9]!] = -300; // p[target] underflows: the loss is about 300
    logits[11 * classes + 3] = Number.POSITIVE_INFINITY; // NaN, as the TypeScript kernel gives
    const dLosses = Float32Array.from({ length: rows }, (_, r) => 1 / rows + r * 1e-4);
    const ours = await run(wasm, logits, targets, dLosses, classes);
    const ref = await run(typescript, logits, targets, dLosses, classes);
    expect(ours.losses[5]).toBe(0);
    expect(ours.losses[9]).toBeGreaterThan(290);
    expect(Number.isNaN(ours.losses[11])).toBe(true);
    expect(Number.isNaN(ref.losses[11])).toBe(true);
    for (let r = 0; r < rows; r++) {
      if (r === 11) continue;
      expect(Math.abs(ours.losses[r]! - ref.losses[r]!), `row ${r}`).toBeLessThan(
        2e-6 * Math.max(1, Math.abs(ref.losses[r]!)),
      );
    }
    let worst = 0;
    let differ = 0;
    for (let i = 0; i < rows * classes; i++) {
      if (Math.floor(i / classes) === 11) continue;
      worst = Math.max(worst, Math.abs(ours.grad[i]! - ref.grad[i]!));
      if (ours.grad[i] !== ref.grad[i]) differ++;
    }
    // The WASM path ran: its f32 exp differs from Math.exp in the last bits somewhere.
    expect(differ).toBeGreaterThan(0);
    // Gradients are at most about 0.06 here; the f32 softmax's exp differs in the last bits.
    expect(worst).toBeLessThan(1e-8);
    for (let c = 0; c < classes; c++) expect(ours.grad[5 * classes + c]).toBe(0);
  });

  it("refuses a target out of range with the TypeScript kernel's error, before writing", async () => {
    const targets = new Int32Array([1, 4]);
    await expect(
      run(wasm, randomLogits(8, 1), targets, new Float32Array([1, 1]), 4),
    ).rejects.toThrow('[crossEntropy] index 4 is out of range [0, 4): targets[1]');
  });
});
