import { afterEach, describe, expect, it, vi } from 'vitest';
import { ArgumentError } from '../errors.js';
import { Tensor } from '../tensor.js';
import { describeBackends, webGpuTestsEnabled } from '../testing/index.js';
import { relaxedFmaSupport } from './cpu/fma-support.js';
import { createBackend } from './create.js';

describe('createBackend', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
  });

  it('creates the CPU backend for WEBSHARD_BACKEND=cpu, with the memory limit', async () => {
    vi.stubEnv('WEBSHARD_BACKEND', 'cpu');
    const backend = await createBackend({ memoryLimit: 1 << 20 });
    expect(backend.kind).toBe('cpu');
    expect(backend.memoryStats().limit).toBe(1 << 20);
    backend.dispose();
  });

  it("passes matmulFma to the CPU backend: 'auto' runs the fused matmul where the engine fuses, the default does not", async () => {
    const fused = await createBackend({ kind: 'cpu', matmulFma: 'auto' });
    const plain = await createBackend({ kind: 'cpu' });
    expect(fused.description.includes('relaxed FMA')).toBe(relaxedFmaSupport() !== 'none');
    expect(plain.description).not.toContain('relaxed FMA');
    fused.dispose();
    plain.dispose();
  });

  it('lets an explicit kind win over WEBSHARD_BACKEND', async () => {
    vi.stubEnv('WEBSHARD_BACKEND', 'webgpu');
    const backend = await createBackend({ kind: 'cpu' });
    expect(backend.kind).toBe('cpu');
    backend.dispose();
  });

  it('rejects an unknown WEBSHARD_BACKEND with a typed error', async () => {
    vi.stubEnv('WEBSHARD_BACKEND', 'metal');
    await expect(createBackend()).rejects.toThrow(ArgumentError);
    await expect(createBackend()).rejects.toThrow(
      '[createBackend] WEBSHARD_BACKEND=metal is not one of auto, cpu, webgpu',
    );
  });

  it.runIf(webGpuTestsEnabled())(
    'creates WebGPU for WEBSHARD_BACKEND=webgpu, kind webgpu and auto where an adapter exists',
    async () => {
      vi.stubEnv('WEBSHARD_BACKEND', 'webgpu');
      const fromEnv = await createBackend();
      expect(fromEnv.kind).toBe('webgpu');
      fromEnv.dispose();
      vi.stubEnv('WEBSHARD_BACKEND', 'cpu');
      const explicit = await createBackend({ kind: 'webgpu', memoryLimit: 1 << 20 });
      expect(explicit.kind).toBe('webgpu');
      expect(explicit.memoryStats().limit).toBe(1 << 20);
      explicit.dispose();
      vi.stubEnv('WEBSHARD_BACKEND', '');
      const auto = await createBackend();
      expect(auto.kind).toBe('webgpu');
      auto.dispose();
    },
  );
});

describeBackends('memory stats through the backend', (ctx) => {
  it('memoryStats tracks allocated, reserved and peaks; resetPeakMemoryStats restarts the peaks', async () => {
    // Its own backend: peaks are backend-wide state.
    const backend = await createBackend({ kind: ctx.kind });
    try {
      const small = Tensor.empty(backend, [1024]); // 4 KiB
      const large = Tensor.empty(backend, [4096]); // 16 KiB
      expect(backend.memoryStats()).toMatchObject({
        allocated: 20480,
        reserved: 20480,
        peakAllocated: 20480,
        peakReserved: 20480,
        allocations: 2,
      });
      large.free();
      expect(backend.memoryStats()).toMatchObject({
        allocated: 4096,
        reserved: 20480, // the 16 KiB block stays in the pool
        peakAllocated: 20480,
      });
      backend.resetPeakMemoryStats();
      expect(backend.memoryStats()).toMatchObject({
        allocated: 4096,
        peakAllocated: 4096,
        peakReserved: 20480,
      });
      const again = Tensor.empty(backend, [2048]); // 8 KiB, a new size class
      expect(backend.memoryStats()).toMatchObject({
        allocated: 12288,
        peakAllocated: 12288,
        reserved: 28672,
        peakReserved: 28672,
      });
      again.free();
      small.free();
      backend.emptyCache();
      backend.resetPeakMemoryStats();
      expect(backend.memoryStats()).toMatchObject({
        allocated: 0,
        reserved: 0,
        peakAllocated: 0,
        peakReserved: 0,
      });
    } finally {
      backend.dispose();
    }
  });
});
