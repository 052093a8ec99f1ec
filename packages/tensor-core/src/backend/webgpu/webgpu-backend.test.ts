import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bytesPerElement, type DType, type HostArray } from '../../dtype.js';
import { f32ToBf16Bits, f32ToF16Bits } from '../../dtype-convert.js';
import { DTypeError, IndexError, OutOfMemoryError } from '../../errors.js';
import { philoxUniform } from '../../random/philox.js';
import { createCpuBackend } from '../../runtime.js';
import { webGpuTestsEnabled } from '../../testing/backends.js';
import type { Backend, KernelTensor } from '../backend.js';
import { createWebGpuBackend, type WebGpuBackend } from './webgpu-backend.js';

// One device per file: SwiftShader pipeline compiles take up to 3 s each.
const enabled = webGpuTestsEnabled();
let gpu: WebGpuBackend;
let shared: WebGpuBackend;
const cpu = createCpuBackend();

beforeAll(async () => {
  if (!enabled) return;
  gpu = await createWebGpuBackend();
  shared = await createWebGpuBackend({ matmulKernel: 'sharedMemory' });
});
afterAll(() => {
  gpu?.dispose();
  shared?.dispose();
});

function make(backend: Backend, shape: number[], dtype: DType = 'f32', offset = 0): KernelTensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return { storage: backend.allocate((n + offset) * bytesPerElement(dtype)), offset, dtype, shape };
}

function seq(n: number, f: (i: number) => number): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => f(i));
}

function bitsOf(values: Float32Array): number[] {
  return [...new Uint32Array(values.buffer, values.byteOffset, values.length)];
}

/** Edge values for casts: ties, subnormals of both formats, overflow, infinities, NaN. */
const EDGES = Float32Array.from(
  [
    0,
    -0,
    1,
    -1,
    65504,
    65519.99,
    65520,
    1e6,
    -1e6,
    2 ** -14,
    2 ** -24,
    2 ** -25,
    2 ** -25 * 1.5,
    3 * 2 ** -25,
    2 ** -126,
    2 ** -149,
    1 + 2 ** -11,
    1 + 3 * 2 ** -11,
    1 + 2 ** -8,
    1 + 3 * 2 ** -8,
    3.4e38,
    Number.POSITIVE_INFINITY,
    Number.NEGATIVE_INFINITY,
    Number.NaN,
    0.1,
    -123.456,
  ].map((v) => v),
);

describe.runIf(enabled)('WebGpuBackend', () => {
  it('casts f32 to f16 and bf16 bit-identically to dtype-convert on edge values', async () => {
    const src = make(gpu, [EDGES.length]);
    gpu.write(src, EDGES);
    for (const dtype of ['f16', 'bf16'] as const) {
      const out = make(gpu, [EDGES.length], dtype, 1);
      gpu.cast(src, out);
      const got = [...((await gpu.read(out)) as Uint16Array)];
      const want = [...EDGES].map((v) => (dtype === 'f16' ? f32ToF16Bits(v) : f32ToBf16Bits(v)));
      expect(got).toEqual(want);
      // And back: f16/bf16 to f32 decodes exactly (NaN stays NaN).
      const back = make(gpu, [EDGES.length]);
      gpu.cast(out, back);
      const decoded = (await gpu.read(back)) as Float32Array;
      const cpuIn = make(cpu, [EDGES.length], dtype);
      cpu.write(cpuIn, new Uint16Array(want));
      const cpuOut = make(cpu, [EDGES.length]);
      cpu.cast(cpuIn, cpuOut);
      const ref = (await cpu.read(cpuOut)) as Float32Array;
      expect([...decoded].map((v) => (Number.isNaN(v) ? 'NaN' : v))).toEqual(
        [...ref].map((v) => (Number.isNaN(v) ? 'NaN' : v)),
      );
    }
  });

  it('writes packed f16 views at odd offsets without clobbering their neighbours', async () => {
    const flat = make(gpu, [9], 'f16');
    gpu.write(flat, new Uint16Array([1, 2, 3, 4, 5, 6, 7, 8, 9]));
    const view = { ...flat, offset: 3, shape: [3] };
    gpu.fill(view, 2);
    const x = make(gpu, [3]);
    gpu.write(x, Float32Array.from([1, 2, 3]));
    const view2 = { ...flat, offset: 7, shape: [1] };
    gpu.write(view2, new Uint16Array([0x3c00]));
    gpu.unary('neg', x, { ...view, offset: 0, shape: [3] } as KernelTensor);
    const all = (await gpu.read(flat)) as Uint16Array;
    const two = f32ToF16Bits(2);
    expect([...all]).toEqual([
      f32ToF16Bits(-1),
      f32ToF16Bits(-2),
      f32ToF16Bits(-3),
      two,
      two,
      two,
      7,
      0x3c00,
      9,
    ]);
    expect([...((await gpu.read({ ...flat, offset: 5, shape: [3] })) as Uint16Array)]).toEqual([
      two,
      7,
      0x3c00,
    ]);
  });

  it('matches the CPU backend on awkward matmul shapes, transposes and batch broadcast', async () => {
    const cases: [number, number, number, number, number, boolean, boolean][] = [
      [1, 1, 1, 1, 1, false, false],
      [1, 5, 7, 3, 1, false, true],
      [3, 13, 9, 17, 3, true, false],
      [2, 11, 31, 8, 1, true, true],
      [1, 33, 66, 65, 1, false, false],
      // M, N and K past the 64x64 tile, K past the 16-deep shared-memory slice.
      [2, 67, 131, 130, 2, false, true],
      [1, 130, 1, 65, 1, true, false],
      [1, 1, 129, 67, 1, false, false],
    ];
    for (const backend of [gpu, shared]) {
      for (const [ba, m, k, n, bb, ta, tb] of cases) {
        const batch = Math.max(ba, bb);
        const aShape = [ba, ta ? k : m, ta ? m : k];
        const bShape = [bb, tb ? n : k, tb ? k : n];
        const aData = seq(ba * m * k, (i) => Math.sin(i * 0.37));
        const bData = seq(bb * k * n, (i) => Math.cos(i * 0.11));
        const run = async (be: Backend) => {
          const a = make(be, aShape);
          const b = make(be, bShape);
          const c = make(be, [batch, m, n]);
          be.write(a, aData);
          be.write(b, bData);
          be.matmul(a, b, c, ta, tb);
          return (await be.read(c)) as Float32Array;
        };
        const got = await run(backend);
        const want = await run(cpu);
        for (let i = 0; i < want.length; i++) expect(got[i]).toBeCloseTo(want[i]!, 4);
      }
    }
  });

  it('matmul rounds f16 outputs from f32 accumulation like the CPU backend', async () => {
    const run = async (be: Backend) => {
      const a = make(be, [1, 3, 5]);
      const b = make(be, [1, 5, 3]);
      const c = make(be, [1, 3, 3], 'f16', 1);
      be.write(
        a,
        seq(15, (i) => i / 7),
      );
      be.write(
        b,
        seq(15, (i) => 1 - i / 9),
      );
      be.matmul(a, b, c, false, false);
      return [...((await be.read(c)) as Uint16Array)];
    };
    const got = await run(gpu);
    const want = await run(cpu);
    for (const [i, h] of got.entries()) expect(Math.abs(h - want[i]!)).toBeLessThanOrEqual(1);
  });

  it('random uniform on [0, 1) is bit-identical to the CPU Philox reference', async () => {
    const out = make(gpu, [1000]);
    gpu.randomUniform(out, 2 ** 40 + 7, 2 ** 32 - 500, 0, 1);
    const got = (await gpu.read(out)) as Float32Array;
    const want = new Float32Array(1000);
    philoxUniform(want, 2 ** 40 + 7, 2 ** 32 - 500, 0, 1);
    expect(bitsOf(got)).toEqual(bitsOf(want));
  });

  it('scatterAdd is deterministic and matches the CPU backend', async () => {
    const run = async (be: Backend) => {
      const src = make(be, [6, 5]);
      const idx = make(be, [6], 'i32');
      const out = make(be, [3, 5]);
      be.write(
        src,
        seq(30, (i) => Math.sin(i) * 1e3 + 0.1),
      );
      be.write(idx, Int32Array.from([2, 0, 2, 2, 1, 0]));
      be.fill(out, 0.25);
      be.scatterAdd(src, idx, out);
      return bitsOf((await be.read(out)) as Float32Array);
    };
    const first = await run(gpu);
    expect(await run(gpu)).toEqual(first);
    const want = new Float32Array(Uint32Array.from(await run(cpu)).buffer);
    const got = new Float32Array(Uint32Array.from(first).buffer);
    for (const [i, v] of want.entries()) expect(got[i]).toBeCloseTo(v, 3);
  });

  it('raises an out-of-range gather index at the next read as an IndexError naming the op', async () => {
    const table = make(gpu, [4, 3]);
    gpu.write(
      table,
      seq(12, (i) => i),
    );
    const idx = make(gpu, [2], 'i32');
    gpu.write(idx, Int32Array.from([1, 9]));
    const out = make(gpu, [2, 3]);
    gpu.gather(table, idx, out);
    const error = await gpu.read(out).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IndexError);
    expect((error as IndexError).message).toMatch(/^\[gather\] index 9 is out of range \[0, 4\)/);
    // The flag is cleared: the next sync succeeds.
    await expect(gpu.sync()).resolves.toBeUndefined();
    const targets = make(gpu, [1], 'i32');
    gpu.write(targets, Int32Array.from([-3]));
    const logits = make(gpu, [1, 4]);
    gpu.write(
      logits,
      seq(4, (i) => i),
    );
    gpu.crossEntropy(logits, targets, make(gpu, [1]), -100);
    await expect(gpu.sync()).rejects.toThrow(/^\[crossEntropy\] index -3 is out of range \[0, 4\)/);
  });

  it('throws OutOfMemoryError past an emulated memory limit and rejects f64', async () => {
    const limited = await createWebGpuBackend({ memoryLimit: 1 << 20 });
    try {
      const a = limited.allocate(512 << 10);
      expect(() => limited.allocate(768 << 10)).toThrow(OutOfMemoryError);
      limited.release(a);
      expect(limited.memoryStats().allocated).toBe(0);
      expect(() => limited.fill(make(limited, [2], 'f64'), 1)).toThrow(DTypeError);
    } finally {
      limited.dispose();
    }
  });

  it('reads a large buffer asynchronously', async () => {
    const n = 4 << 20;
    const big = make(gpu, [n]);
    const data = seq(n, (i) => i % 1021);
    gpu.write(big, data);
    const pending = gpu.read(big);
    expect(pending).toBeInstanceOf(Promise);
    const got = (await pending) as HostArray;
    expect(got.length).toBe(n);
    expect(got[n - 1]).toBe(data[n - 1]);
    expect(got[12345]).toBe(data[12345]);
    gpu.release(big.storage);
  });

  it('throws NoAdapterError listing what it tried when no driver exists', async () => {
    const runtime = fileURLToPath(new URL('./gpu-runtime.ts', import.meta.url));
    const script = `import('${runtime}').then((m) => m.acquireAdapter()).then(() => console.log('FOUND'), (e) => { console.log(e.name + ': ' + e.message); process.exit(0); })`;
    const out = await new Promise<string>((resolve, reject) => {
      execFile(
        process.execPath,
        ['--conditions=@webshard/source', '--import', 'tsx', '-e', script],
        {
          env: {
            ...process.env,
            VK_ICD_FILENAMES: '/nonexistent/icd.json',
            WEBSHARD_NO_SWIFTSHADER: '1',
          },
          timeout: 30_000,
        },
        (error, stdout) => (error ? reject(error) : resolve(stdout)),
      );
    });
    expect(out).toContain(
      'NoAdapterError: [webgpu] no WebGPU adapter found; tried: VK_ICD_FILENAMES=/nonexistent/icd.json; SwiftShader lookup disabled',
    );
    expect(out).toContain('apt-get install -y libvulkan1 chromium-common');
  });
});
