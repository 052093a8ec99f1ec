import { afterAll, describe, expect, it } from 'vitest';
import { add, linear, matmul, mul, sum, tensor } from '../../ops/index.js';
import { createCpuBackend } from '../../runtime.js';
import type { Tensor } from '../../tensor.js';
import { firstDifference } from '../../testing/first-difference.js';
import { seededValues } from '../../testing/reference.js';
import type { CpuBackend } from './cpu-backend.js';

// [Note: the bias in the gemm]: `linear` on the CPU backend is one kernel where k fits in one of
// the gemm's k blocks (256), with the bits of the matmul and the broadcast add it replaces.
const backends: [string, CpuBackend][] = [
  ['one thread', createCpuBackend({ matmulThreads: 1 })],
  ['two threads', createCpuBackend({ matmulThreads: 2 })],
];
afterAll(() => {
  for (const [, b] of backends) b.dispose();
});

/** x [...lead, k], weight [n, k], bias [n]. */
interface Case {
  lead: number[];
  k: number;
  n: number;
}
const FUSED: Case[] = [
  { lead: [16, 32], k: 64, n: 256 }, // the default GPT's c_fc, split between the threads
  { lead: [512], k: 64, n: 64 }, // 2^21 multiply-adds: the threads' smallest split
  { lead: [5], k: 7, n: 13 }, // edge tiles in both directions
  { lead: [2, 3, 4], k: 256, n: 9 }, // k one whole block, x of rank 4
  { lead: [], k: 256, n: 3 }, // a vector
];

function operand(backend: CpuBackend, shape: number[], seed: number, grad: boolean): Tensor {
  const size = shape.reduce((p, d) => p * d, 1);
  const t = tensor(Float32Array.from(seededValues(size, seed)), { backend, shape });
  t.requiresGrad = grad;
  return t;
}

/** Bits of a tensor's values. */
async function bits(t: Tensor | null): Promise<Uint32Array> {
  const values = (await t!.read()) as Float32Array;
  return new Uint32Array(values.buffer, values.byteOffset, values.length);
}

/** out, and the gradients of sum(out r) for x, weight and bias, by `linear` or by the two ops. */
async function run(backend: CpuBackend, c: Case, fused: boolean) {
  const x = operand(backend, [...c.lead, c.k], 1, true);
  const w = operand(backend, [c.n, c.k], 2, true);
  const b = operand(backend, [c.n], 3, true);
  const out = fused ? linear(x, w, b) : add(matmul(x, w, { transposeB: true }), b);
  const r = operand(backend, out.shape as number[], 4, false);
  await sum(mul(out, r)).backward();
  return {
    op: out.gradFn?.name,
    out: await bits(out),
    dx: await bits(x.grad),
    dw: await bits(w.grad),
    db: await bits(b.grad),
  };
}

describe.each(backends)('linear on the CPU backend, %s', (_, backend) => {
  it.each(FUSED)('gives the bits of matmul and add, forward and backward: %o', async (c) => {
    await backend.startMatmulThreads();
    const fused = await run(backend, c, true);
    const ops = await run(backend, c, false);
    expect(fused.op).toBe('linear');
    expect(ops.op).toBe('add');
    for (const key of ['out', 'dx', 'dw', 'db'] as const) {
      expect(firstDifference(fused[key], ops[key]), key).toBe(-1);
    }
  });

  it("makes the bias's gradient ready before the weight's, as the add and the matmul did", async () => {
    // The order DDP's buckets fill in (ddp-buckets' shm-parity test: the output layer's bias first).
    for (const fused of [true, false]) {
      const x = operand(backend, [4, 8], 1, true);
      const w = operand(backend, [16, 8], 2, true);
      const b = operand(backend, [16], 3, true);
      const ready: string[] = [];
      w.registerPostAccumulateGradHook(() => void ready.push('weight'));
      b.registerPostAccumulateGradHook(() => void ready.push('bias'));
      const out = fused ? linear(x, w, b) : add(matmul(x, w, { transposeB: true }), b);
      await sum(out).backward();
      expect(ready, fused ? 'linear' : 'matmul and add').toEqual(['bias', 'weight']);
    }
  });

  it('declines k past one block, leaving the output alone, and linear runs the two ops', async () => {
    const c = { lead: [8], k: 257, n: 16 };
    const x = operand(backend, [8, 257], 1, false);
    const w = operand(backend, [16, 257], 2, false);
    const b = operand(backend, [16], 3, false);
    const out = tensor(new Float32Array(8 * 16).fill(7), { backend, shape: [8, 16] });
    const took = backend.linear(
      x.kernel('test'),
      w.kernel('test'),
      b.kernel('test'),
      out.kernel('test'),
    );
    expect(took).toBe(false);
    expect([...((await out.read()) as Float32Array)].every((v) => v === 7)).toBe(true);
    const fused = await run(backend, c, true);
    expect(fused.op).toBe('add');
    expect(firstDifference(fused.out, (await run(backend, c, false)).out)).toBe(-1);
  });

  it('declines f64 operands', () => {
    const x = tensor(new Float64Array(6), { backend, dtype: 'f64', shape: [2, 3] });
    const w = tensor(new Float64Array(12), { backend, dtype: 'f64', shape: [4, 3] });
    const b = tensor(new Float64Array(4), { backend, dtype: 'f64', shape: [4] });
    const out = tensor(new Float64Array(8), { backend, dtype: 'f64', shape: [2, 4] });
    const kernels = [x, w, b, out].map((t) => t.kernel('test'));
    expect(backend.linear(kernels[0]!, kernels[1]!, kernels[2]!, kernels[3]!)).toBe(false);
  });
});
