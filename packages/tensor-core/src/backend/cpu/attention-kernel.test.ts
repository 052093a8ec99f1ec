import { afterAll, describe, expect, it } from 'vitest';
import { attendHeads } from '../../nn/attention.js';
import { tensor } from '../../ops/index.js';
import { createCpuBackend } from '../../runtime.js';
import type { Tensor } from '../../tensor.js';
import { firstDifference } from '../../testing/first-difference.js';
import { seededValues } from '../../testing/reference.js';
import { withoutKernels } from '../../testing/without-kernels.js';
import type { Backend } from '../backend.js';
import { MAX_T } from './attention-kernel.js';
import type { CpuBackend } from './cpu-backend.js';
import type { MatmulThreads } from './matmul-threads.js';

// [Note: attention's heads in one call]: attention over small heads is one kernel each way on the
// CPU backend, with the bits of the strided matmuls and the masked softmax it replaces.

const poolOf = (backend: CpuBackend) =>
  (backend as unknown as { wasmMatmul: { threads: MatmulThreads } }).wasmMatmul.threads;

/** `backend` without its attention kernels (the strided matmuls and the softmax run). */
const withoutAttention = (backend: Backend) =>
  withoutKernels(backend, ['attention', 'attentionBackward']);

/** `backend` whose attentionBackward declines (the gradient's ops run). */
function backwardDeclined(backend: Backend): Backend {
  return new Proxy(backend, {
    get(target, name) {
      if (name === 'attentionBackward') return () => false;
      const value = Reflect.get(target, name, target) as unknown;
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

const bits = async (t: Tensor) => {
  const v = (await t.read()) as Float32Array;
  return new Uint32Array(v.buffer, v.byteOffset, v.length);
};

interface Run {
  op: string | undefined;
  y: Uint32Array;
  dqkv: Uint32Array;
}

/** y and dqkv of attention over qkv [b, t, 3c] in nh heads, with dy from `seed + 1`. */
async function attend(backend: Backend, [b, t, c, nh]: number[], seed: number): Promise<Run> {
  const qkv = tensor(Float32Array.from(seededValues(b! * t! * 3 * c!, seed, -2, 2)), {
    backend,
    shape: [b!, t!, 3 * c!],
  });
  qkv.requiresGrad = true;
  const dy = tensor(Float32Array.from(seededValues(b! * t! * c!, seed + 1)), {
    backend,
    shape: [b!, t!, c!],
  });
  const above = Array.from({ length: t! * t! }, (_, i) => (i % t! > Math.floor(i / t!) ? 1 : 0));
  const mask = tensor(above, { backend, shape: [t!, t!] });
  const y = attendHeads(qkv, nh!, mask);
  await y.backward(dy);
  const run = { op: y.gradFn?.name, y: await bits(y), dqkv: await bits(qkv.grad!) };
  for (const x of [qkv, dy, mask, y]) x.free();
  return run;
}

// [B, T, C, heads]: the default GPT's (64 pairs, split between the threads), heads of 4, 3 heads
// (a scale that is not an f32: 1 / sqrt(12)), T = 64, and one pair (never split).
const SHAPES = [
  [16, 32, 64, 4],
  [2, 8, 8, 2],
  [3, 12, 36, 3],
  [2, 64, 128, 2],
  [1, 4, 16, 1],
];

describe('attention in one kernel on the CPU backend', () => {
  const made: CpuBackend[] = [];
  afterAll(() => {
    for (const b of made) b.dispose();
  });
  for (const fma of ['off', 'auto'] as const) {
    for (const threads of [1, 2]) {
      const backend = createCpuBackend({ matmulThreads: threads, matmulFma: fma });
      made.push(backend);
      for (const shape of SHAPES) {
        it(`gives the strided path's bits, ${threads} thread(s), fma ${fma}, [${shape.join(', ')}]`, async () => {
          await backend.startMatmulThreads();
          const pool = threads > 1 ? poolOf(backend) : null;
          const before = pool?.attendedByWorkers ?? 0;
          const seed = 7 + shape[1]!;
          const reference = await attend(withoutAttention(backend), shape, seed);
          expect(reference.op).toBe('matmulViews');
          // Until a worker has done a chunk where the call splits (the calling thread may claim
          // them all before the system runs a worker), each time the same bits.
          const splits = pool !== null && shape[0]! * shape[3]! > 2 && shape[1]! >= 32;
          for (let call = 0; call < (splits ? 100 : 1); call++) {
            const fused = await attend(backend, shape, seed);
            expect(fused.op).toBe('attention');
            expect(firstDifference(fused.y, reference.y)).toBe(-1);
            expect(firstDifference(fused.dqkv, reference.dqkv)).toBe(-1);
            if (pool !== null && pool.attendedByWorkers > before) break;
          }
          if (splits) expect(pool!.attendedByWorkers).toBeGreaterThan(before);
        });
      }
    }
  }

  it("runs the gradient's ops, with the same bits, where attentionBackward declines", async () => {
    const backend = createCpuBackend({ matmulThreads: 1 });
    made.push(backend);
    const shape = [2, 8, 16, 2];
    const fused = await attend(backend, shape, 3);
    const byOps = await attend(backwardDeclined(backend), shape, 3);
    expect(byOps.op).toBe('attention');
    expect(firstDifference(byOps.dqkv, fused.dqkv)).toBe(-1);
    expect(firstDifference(byOps.y, fused.y)).toBe(-1);
  });

  it('declines T or a head size not a multiple of 4, T past MAX_T, f64 and the typescript kernels', async () => {
    const backend = createCpuBackend({ matmulThreads: 1 });
    const typescript = createCpuBackend({ matmulThreads: 1, kernels: 'typescript' });
    made.push(backend, typescript);
    expect((await attend(backend, [2, 6, 16, 2], 1)).op).toBe('matmulViews'); // T = 6
    expect((await attend(backend, [2, 8, 12, 2], 1)).op).toBe('matmulViews'); // heads of 6
    expect((await attend(backend, [1, MAX_T + 4, 4, 1], 1)).op).toBe('matmulViews');
    expect((await attend(typescript, [2, 8, 16, 2], 1)).op).toBe('matmulViews');
    const qkv = tensor(Float64Array.from(seededValues(2 * 8 * 48, 1)), {
      backend,
      dtype: 'f64',
      shape: [2, 8, 48],
    });
    const mask = tensor(new Array<number>(64).fill(0), { backend, dtype: 'f64', shape: [8, 8] });
    qkv.requiresGrad = true;
    expect(attendHeads(qkv, 2, mask).gradFn?.name).toBe('matmulViews');
  });
});
