import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCpuBackend } from '../../runtime.js';
import { webGpuTestsEnabled } from '../../testing/backends.js';
import type { Backend, KernelTensor } from '../backend.js';
import type { MatmulTuning } from './matmul.js';
import { MATMUL_TUNING_TABLE, matmulTuningFor } from './matmul-tuning.js';
import { createWebGpuBackend, type WebGpuBackend } from './webgpu-backend.js';

const LAVAPIPE = {
  vendor: 'mesa',
  architecture: 'software',
  device: 'llvmpipe-llvm-15-0-6-256-bits-',
  description: 'llvmpipe: Mesa 25.0.7-2~bpo12+1 (LLVM 15.0.6) 0.0.1',
};
const SWIFTSHADER = {
  vendor: 'google',
  architecture: 'swiftshader',
  device: 'swiftshader-device-subzero-',
  description: 'SwiftShader driver 5.0.0',
};
const NVIDIA = { vendor: 'nvidia', architecture: 'hopper', device: '', description: 'H100' };

describe('matmulTuningFor', () => {
  it('picks the row of the adapter, by its info', () => {
    expect(matmulTuningFor(LAVAPIPE).row).toBe('lavapipe');
    expect(matmulTuningFor(SWIFTSHADER).row).toBe('SwiftShader');
    expect(matmulTuningFor(NVIDIA)).toEqual({ tuning: { kernel: 'sharedMemory' }, row: 'GPU' });
    expect(matmulTuningFor(undefined).row).toBe('GPU');
    expect(matmulTuningFor(LAVAPIPE).tuning).not.toEqual(matmulTuningFor(SWIFTSHADER).tuning);
  });

  it('lets a forced kernel win over the table', () => {
    expect(matmulTuningFor(LAVAPIPE, 'sharedMemory')).toEqual({
      tuning: { kernel: 'sharedMemory' },
      row: 'forced shared',
    });
    expect(matmulTuningFor(NVIDIA, 'registerTiled').tuning.kernel).toBe('registerTiled');
    expect(matmulTuningFor(LAVAPIPE, 'registerTiled').row).toBe('lavapipe');
  });
});

// Every tiling of the table, and the strided layout the tuning bench tries, on this adapter.
const TUNINGS: MatmulTuning[] = [
  ...new Set(
    MATMUL_TUNING_TABLE.map((row) => row.tuning).filter((t) => t.kernel !== 'sharedMemory'),
  ),
  {
    kernel: 'registerTiled',
    tileM: 4,
    tileN: 8,
    workgroup: [16, 2],
    columns: 'strided',
    vectorLoads: true,
  },
];

describe.skipIf(!webGpuTestsEnabled())('every tuning computes the same matmul', () => {
  const cpu = createCpuBackend();
  const gpus: WebGpuBackend[] = [];
  beforeAll(async () => {
    for (const matmulTuning of TUNINGS) gpus.push(await createWebGpuBackend({ matmulTuning }));
  });
  afterAll(() => {
    for (const gpu of gpus) gpu.dispose();
    cpu.dispose();
  });

  // [batchA, m, k, n, batchB, transposeA, transposeB, offset]: vec4 loads where k and n are
  // multiples of 4 and the offset is too, scalar loads otherwise; edges on every axis.
  const cases: [number, number, number, number, number, boolean, boolean, number][] = [
    [1, 37, 64, 20, 1, false, false, 0],
    [2, 9, 12, 4, 1, false, false, 0],
    [1, 70, 68, 132, 2, false, false, 4],
    [1, 70, 68, 132, 1, false, false, 1],
    [3, 5, 7, 9, 3, false, false, 0],
    [1, 33, 40, 36, 1, true, false, 0],
    [1, 33, 40, 36, 1, false, true, 0],
    [2, 16, 8, 12, 2, true, true, 0],
  ];

  function make(be: Backend, shape: number[], offset: number, data?: Float32Array): KernelTensor {
    const size = shape.reduce((a, b) => a * b, 1);
    const t = { storage: be.allocate((size + offset) * 4), offset, dtype: 'f32' as const, shape };
    if (data) be.write(t, data);
    return t;
  }

  it('matches the CPU backend on vec4-aligned, unaligned, edge and batched shapes', async () => {
    for (const [index, gpu] of gpus.entries()) {
      for (const [ba, m, k, n, bb, ta, tb, offset] of cases) {
        const batch = Math.max(ba, bb);
        const aData = Float32Array.from({ length: ba * m * k }, (_, i) => Math.sin(i * 0.37));
        const bData = Float32Array.from({ length: bb * k * n }, (_, i) => Math.cos(i * 0.11));
        const run = async (be: Backend) => {
          const a = make(be, [ba, ta ? k : m, ta ? m : k], offset, aData);
          const b = make(be, [bb, tb ? n : k, tb ? k : n], offset, bData);
          const c = make(be, [batch, m, n], offset);
          be.matmul(a, b, c, ta, tb);
          const out = (await be.read(c)) as Float32Array;
          for (const t of [a, b, c]) be.release(t.storage);
          return out;
        };
        const got = await run(gpu);
        const want = await run(cpu);
        let worst = 0;
        for (let i = 0; i < want.length; i++) {
          worst = Math.max(worst, Math.abs(got[i]! - want[i]!));
        }
        expect(
          worst,
          `${JSON.stringify(TUNINGS[index])} on ${[ba, m, k, n, bb, ta, tb, offset]}`,
        ).toBeLessThan(1e-4 * k);
      }
    }
  }, 240_000);
});
