import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCpuBackend } from '../../runtime.js';
import { webGpuTestsEnabled } from '../../testing/backends.js';
import type { Backend, KernelTensor } from '../backend.js';
import type { MatmulTuning } from './matmul.js';
import { MATMUL_TUNING_TABLE, matmulTuningFor, usableTuning } from './matmul-tuning.js';
import { registerTiledWgsl } from './matmul-tiled-wgsl.js';
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

describe('usableTuning', () => {
  const lavapipe = matmulTuningFor(LAVAPIPE).tuning;
  const sized = (n: number) => ({ ...LAVAPIPE, subgroupMinSize: n, subgroupMaxSize: n });

  it("keeps the subgroup tiling only with the feature and subgroups of the tiling's size", () => {
    expect(lavapipe.kernel === 'registerTiled' && lavapipe.subgroupTiling).toBeTruthy();
    expect(usableTuning(lavapipe, new Set(['subgroups']), sized(8))).toBe(lavapipe);
    const { subgroupTiling: _, ...plain } = lavapipe as typeof lavapipe & {
      subgroupTiling: unknown;
    };
    expect(usableTuning(lavapipe, new Set(), sized(8))).toEqual(plain);
    expect(usableTuning(lavapipe, new Set(['subgroups']), sized(4))).toEqual(plain);
    const varying = { ...LAVAPIPE, subgroupMinSize: 4, subgroupMaxSize: 8 };
    expect(usableTuning(lavapipe, new Set(['subgroups']), varying)).toEqual(plain);
    expect(usableTuning(lavapipe, new Set(['subgroups']), LAVAPIPE)).toEqual(plain);
    const shared = { kernel: 'sharedMemory' } as const;
    expect(usableTuning(shared, new Set(['subgroups']), sized(8))).toBe(shared);
  });

  it('refuses a shared A the kernel cannot hand round', () => {
    const tiling = { tileM: 16, tileN: 4, workgroup: [8, 1] as const, columns: 'blocked' as const };
    expect(() =>
      registerTiledWgsl('f32', 'f32', false, false, tiling, { a: false, b: true, shareA: 8 }),
    ).toThrow('A is shared across a subgroup as vec4 loads or strided, one subgroup a workgroup');
    const twoRows = { ...tiling, workgroup: [8, 2] as const };
    expect(() =>
      registerTiledWgsl('f32', 'f32', false, false, twoRows, { a: true, b: true, shareA: 8 }),
    ).toThrow('one subgroup a workgroup');
    expect(() =>
      registerTiledWgsl('f32', 'f32', true, false, { ...tiling, tileM: 6 }, { a: true, b: true }),
    ).toThrow("a transposed A's vec4 loads hold four rows: tileM must be a multiple of 4");
    const wgsl = registerTiledWgsl('f32', 'f32', true, true, tiling, {
      a: true,
      b: true,
      shareA: 8,
    });
    expect(wgsl.startsWith('enable subgroups;')).toBe(true);
    expect(wgsl).not.toContain('return;');
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

// Skipped only where no WebGPU adapter is likely (no `webgpu` package, no Vulkan driver, no
// SwiftShader): [Note: requiring WebGPU in tests]; CI sets WEBSHARD_REQUIRE_WEBGPU=1, which makes
// that an error, so CI always runs it.
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
    // A and B transposed and vec4-aligned (read as vec4 along m and along k), with edges: rows
    // past M in a group of 16, columns past N, a k tail, B broadcast over the batch, an offset.
    [1, 36, 40, 20, 1, true, false, 0],
    [2, 44, 12, 21, 1, true, false, 4],
    [2, 37, 44, 21, 1, false, true, 0],
    [3, 52, 20, 36, 3, false, true, 8],
    [2, 20, 9, 8, 2, true, true, 0],
    [1, 12, 28, 40, 1, true, true, 4],
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

// Both WebGPU suites here are skipped only where no WebGPU adapter is likely (no `webgpu` package,
// no Vulkan driver, no SwiftShader): [Note: requiring WebGPU in tests]. CI sets
// WEBSHARD_REQUIRE_WEBGPU=1, which makes that an error, so CI always runs them.
describe.skipIf(!webGpuTestsEnabled())("A's rows shared across a subgroup", () => {
  const backends: WebGpuBackend[] = [];
  beforeAll(async () => {
    backends.push(await createWebGpuBackend());
  });
  afterAll(() => {
    for (const b of backends) b.dispose();
  });

  it('the device has subgroups where the adapter offers them, and the table row keeps its tiling', async () => {
    const [gpu] = backends as [WebGpuBackend];
    expect(gpu.device.features.has('subgroups')).toBe(gpu.adapter.features.has('subgroups'));
    const row = matmulTuningFor(gpu.adapter.info).tuning;
    const size = row.kernel === 'registerTiled' ? row.subgroupTiling?.subgroupSize : undefined;
    const info = gpu.adapter.info;
    const fixed = info.subgroupMinSize === size && info.subgroupMaxSize === size;
    const kept = gpu.matmulTuning.kernel === 'registerTiled' && gpu.matmulTuning.subgroupTiling;
    console.log(
      `subgroups: ${gpu.adapter.features.has('subgroups')}, sizes ${info.subgroupMinSize}-${info.subgroupMaxSize}, the table's ${size}: shared A ${kept ? 'on' : 'off'} (${gpu.description})`,
    );
    expect(Boolean(kept)).toBe(gpu.adapter.features.has('subgroups') && fixed);
  });

  it('gives the bits of the kernel that loads A in every lane', async () => {
    const [gpu] = backends as [WebGpuBackend];
    const info = gpu.adapter.info;
    const size = info.subgroupMinSize === info.subgroupMaxSize ? info.subgroupMinSize : undefined;
    if (!gpu.device.features.has('subgroups') || size === undefined) {
      // Only an adapter without subgroups of one size: CI's lavapipe has them (8 lanes).
      console.log(`no subgroups of one size on ${gpu.description}: nothing to compare`);
      return;
    }
    // The table's tuning where it applies here, else lavapipe's row resized for these subgroups.
    const lavapipe = matmulTuningFor(LAVAPIPE).tuning as MatmulTuning & { kernel: 'registerTiled' };
    const resized = lavapipe.subgroupTiling && {
      ...lavapipe.subgroupTiling,
      subgroupSize: size,
      tileM: 2 * size,
      workgroup: [size, 1] as const,
    };
    const tuning: MatmulTuning =
      gpu.matmulTuning.kernel === 'registerTiled' && gpu.matmulTuning.subgroupTiling
        ? gpu.matmulTuning
        : { ...lavapipe, subgroupTiling: resized };
    const { subgroupTiling: _, ...plain } = tuning as MatmulTuning & { subgroupTiling: unknown };
    const shared = await createWebGpuBackend({ matmulTuning: tuning });
    const other = await createWebGpuBackend({ matmulTuning: plain });
    backends.push(shared, other);
    // The default GPT's products (forward with B transposed, backward's two), a batch, edges.
    const cases: [number, number, number, number, boolean, boolean][] = [
      [16, 32, 64, 192, false, true],
      [16, 32, 256, 64, false, false],
      [1, 64, 512, 256, true, false],
      [2, 36, 20, 21, true, true],
      [3, 52, 44, 12, false, false],
    ];
    for (const [batch, m, k, n, ta, tb] of cases) {
      const aData = Float32Array.from({ length: batch * m * k }, (_, i) => Math.sin(i * 0.37));
      const bData = Float32Array.from({ length: k * n }, (_, i) => Math.cos(i * 0.11));
      const run = async (be: WebGpuBackend) => {
        const t = (shape: number[], data?: Float32Array) => {
          const size = shape.reduce((p, d) => p * d, 1);
          const x = { storage: be.allocate(size * 4), offset: 0, dtype: 'f32' as const, shape };
          if (data) be.write(x, data);
          return x;
        };
        const a = ta ? t([1, k, m * batch], aData) : t([batch, m, k], aData);
        const b = t([1, tb ? n : k, tb ? k : n], bData);
        const c = t([ta ? 1 : batch, ta ? m * batch : m, n]);
        be.matmul(a, b, c, ta, tb);
        const out = new Uint32Array(((await be.read(c)) as Float32Array).buffer);
        for (const x of [a, b, c]) be.release(x.storage);
        return out;
      };
      const sharedBits = await run(shared);
      const plainBits = await run(other);
      expect(sharedBits, `${[batch, m, k, n, ta, tb]}`).toEqual(plainBits);
    }
  }, 120_000);
});
