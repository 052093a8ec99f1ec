import { afterAll, describe, expect, it } from 'vitest';
import { BackendError } from '../../errors.js';
import { createCpuBackend } from '../../runtime.js';
import { seededValues } from '../../testing/reference.js';
import type { Backend, KernelTensor, StridedOperand } from '../backend.js';
import type { CpuBackend } from './cpu-backend.js';
import { type Gemm, type MatmulThreads, THREADED_MIN_MACS } from './matmul-threads.js';
import type { WasmMatmul } from './matmul-wasm.js';
import { BATCH_MAX_MACS, BATCH_MIN_MACS } from './matmul-wasm-batch.js';
import { loadWasmMatmul } from './matmul-wasm-load.js';

// [Note: a batch of small products on the threads]: batches of products too small to split by
// rows run split by product, each product's bits those of one thread.

const poolOf = (backend: CpuBackend) =>
  (backend as unknown as { wasmMatmul: { threads: MatmulThreads } }).wasmMatmul.threads;

function make(backend: Backend, size: number, seed?: number): KernelTensor {
  const t = {
    storage: backend.allocate(size * 4),
    offset: 0,
    dtype: 'f32' as const,
    shape: [size],
  };
  backend.write(
    t,
    seed === undefined
      ? new Float32Array(size)
      : Float32Array.from(seededValues(size, seed, -1, 1)),
  );
  return t;
}

/** Whether two arrays hold the same bytes. */
function sameBits(a: Float32Array, b: Float32Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(
    Buffer.from(b.buffer, b.byteOffset, b.byteLength),
  );
}

// Contiguous batches: the default GPT's attention shapes, odd sizes past the 4x8 tile, either
// operand transposed, one operand shared by the batch (A transposed, so it is not folded into
// rows: [Note: a shared B folds the batch into rows]), and GPT-2's attention.
const BATCHES = [
  { batchA: 64, batchB: 64, m: 32, k: 16, n: 32, ta: false, tb: true },
  { batchA: 64, batchB: 64, m: 32, k: 32, n: 16, ta: true, tb: false },
  { batchA: 37, batchB: 37, m: 13, k: 29, n: 51, ta: false, tb: false },
  { batchA: 1, batchB: 40, m: 21, k: 33, n: 19, ta: true, tb: true },
  { batchA: 40, batchB: 1, m: 21, k: 33, n: 19, ta: true, tb: false },
  { batchA: 9, batchB: 9, m: 256, k: 64, n: 256, ta: false, tb: true },
];

describe('a batch of small products on the WASM matmul threads', () => {
  const backends = new Map<number, CpuBackend>();
  for (const threads of [1, 2, 3]) {
    backends.set(threads, createCpuBackend({ matmulThreads: threads, matmulFma: 'off' }));
  }
  afterAll(() => {
    for (const b of backends.values()) b.dispose();
  });

  it('splits by product where rows cannot or where every thread gets two', async () => {
    expect(await backends.get(2)!.startMatmulThreads()).toBe(2);
    const pool = poolOf(backends.get(2)!);
    expect([BATCH_MIN_MACS, BATCH_MAX_MACS, THREADED_MIN_MACS]).toEqual([
      2 ** 19,
      2 ** 24,
      2 ** 21,
    ]);
    // The default GPT's attention: 64 products of 32 x 16 x 32 a call.
    expect(pool.batchThreads(64, 32 * 16 * 32)).toBe(2);
    // Too little in all to pay for a meeting of the threads.
    expect(pool.batchThreads(8, 32 * 16 * 32)).toBe(1);
    expect(pool.batchThreads(1, BATCH_MIN_MACS)).toBe(1);
    // GPT-2's attention (48 of 256 x 64 x 256): by product; 3 of them: each by rows.
    expect(pool.batchThreads(48, 256 * 64 * 256)).toBe(2);
    expect(pool.batchThreads(3, 256 * 64 * 256)).toBe(1);
    // Large products split by rows, each on its own.
    expect(pool.batchThreads(64, BATCH_MAX_MACS)).toBe(1);
    // Panels for every thread that may join, even with fewer products than threads.
    expect(await backends.get(3)!.startMatmulThreads()).toBe(3);
    expect(poolOf(backends.get(3)!).batchThreads(2, 2 ** 18)).toBe(3);
  });

  for (const s of BATCHES) {
    it(`gives one thread's bits on 2 and 3 threads: ${s.batchA}/${s.batchB} x ${s.m}x${s.k}x${s.n}, transposes ${s.ta} ${s.tb}`, async () => {
      const batch = Math.max(s.batchA, s.batchB);
      const results: Float32Array[] = [];
      for (const threads of [1, 2, 3]) {
        const backend = backends.get(threads)!;
        await backend.startMatmulThreads();
        const a = make(backend, s.batchA * s.m * s.k, 11 + s.m);
        const b = make(backend, s.batchB * s.k * s.n, 13 + s.n);
        const out = make(backend, batch * s.m * s.n);
        const shapeA = s.ta ? [s.batchA, s.k, s.m] : [s.batchA, s.m, s.k];
        const shapeB = s.tb ? [s.batchB, s.n, s.k] : [s.batchB, s.k, s.n];
        const pool = threads > 1 ? poolOf(backend) : null;
        const before = pool?.batchedByWorkers ?? 0;
        // Until a worker has done a chunk (the calling thread may claim them all before the
        // system runs a worker), each time the same bits.
        for (let call = 0; call < (pool === null ? 1 : 200); call++) {
          backend.matmul(
            { ...a, shape: shapeA },
            { ...b, shape: shapeB },
            { ...out, shape: [batch, s.m, s.n] },
            s.ta,
            s.tb,
          );
          const got = (await backend.read(out)) as Float32Array;
          if (threads === 1) results.push(got);
          else expect(sameBits(got, results[0]!)).toBe(true);
          if (pool !== null && pool.batchedByWorkers > before) break;
        }
        if (pool !== null) expect(pool.batchedByWorkers).toBeGreaterThan(before);
        for (const t of [a, b, out]) backend.release(t.storage);
      }
    });
  }

  // Attention's products through strides ([Note: the CPU strided matmul]): q k^T from one qkv
  // [B 8, T 32, 3 x 64] (4 heads of 16), att v into the merged heads, the gradient of k^T's
  // column-major window accumulated, and a weight-like gradient accumulated over the batch.
  const [B, T, C, H] = [8, 32, 64, 4];
  const hs = C / H;
  const STRIDED = [
    {
      name: 'q k^T from one qkv',
      m: T,
      k: hs,
      n: T,
      a: { size: B * T * 3 * C, offset: 0, strides: [T * 3 * C, hs, 3 * C, 1] },
      b: { shared: true, offset: C, strides: [T * 3 * C, hs, 1, 3 * C] },
      out: { size: B * H * T * T, offset: 0, strides: [H * T * T, T * T, T, 1] },
      accumulate: false,
    },
    {
      name: 'att v into merged heads',
      m: T,
      k: T,
      n: hs,
      a: { size: B * H * T * T, offset: 0, strides: [H * T * T, T * T, T, 1] },
      b: { size: B * T * 3 * C, offset: 2 * C, strides: [T * 3 * C, hs, 3 * C, 1] },
      out: { size: B * T * C, offset: 0, strides: [T * C, hs, C, 1] },
      accumulate: false,
    },
    {
      name: "dk^T into k's column-major window, accumulated",
      m: hs,
      k: T,
      n: T,
      a: { size: B * T * 3 * C, offset: 0, strides: [T * 3 * C, hs, 1, 3 * C] },
      b: { size: B * H * T * T, offset: 0, strides: [H * T * T, T * T, T, 1] },
      out: { size: B * T * 3 * C, offset: C, strides: [T * 3 * C, hs, 1, 3 * C] },
      accumulate: true,
    },
    {
      name: 'a broadcast A, every product added into one out in batch order',
      m: 24,
      k: 40,
      n: 24,
      a: { size: 24 * 40, offset: 0, strides: [0, 0, 40, 1] },
      b: { size: B * H * 40 * 24, offset: 0, strides: [H * 960, 960, 24, 1] },
      out: { size: 24 * 24, offset: 0, strides: [0, 0, 24, 1] },
      accumulate: true,
    },
  ];
  for (const c of STRIDED) {
    it(`matmulStrided: ${c.name} gives one thread's bits on 2 threads`, async () => {
      expect(B * H * c.m * c.k * c.n).toBeGreaterThanOrEqual(BATCH_MIN_MACS);
      const results: Float32Array[] = [];
      for (const threads of [1, 2]) {
        const backend = backends.get(threads)!;
        await backend.startMatmulThreads();
        const pool = threads > 1 ? poolOf(backend) : null;
        const before = pool?.batchedByWorkers ?? 0;
        for (let call = 0; call < (pool === null ? 1 : 200); call++) {
          const a = make(backend, c.a.size, 21);
          const b = 'shared' in c.b ? a : make(backend, c.b.size, 22);
          const out = make(backend, c.out.size, 23);
          const view = (
            t: KernelTensor,
            v: { offset: number; strides: number[] },
          ): StridedOperand => ({
            storage: t.storage,
            offset: v.offset,
            dtype: 'f32',
            strides: v.strides,
          });
          backend.matmulStrided!(
            view(a, c.a),
            view(b, c.b),
            view(out, c.out),
            [B, H],
            c.m,
            c.k,
            c.n,
            c.accumulate,
          );
          const got = (await backend.read(out)) as Float32Array;
          for (const t of new Set([a, b, out])) backend.release(t.storage);
          if (threads === 1) results.push(got);
          else expect(sameBits(got, results[0]!)).toBe(true);
          if (pool === null || pool.batchedByWorkers > before) break;
        }
        if (pool !== null) expect(pool.batchedByWorkers).toBeGreaterThan(before);
      }
    });
  }
});

describe("a batch call past the module's memory budget", () => {
  // Each thread's panels, and every product's C, must fit beside the operands; where they do not,
  // the call runs as one thread's would, in the budget, with the same bits.
  it('runs on the calling thread, with the bits of one thread, contiguous and strided', async () => {
    const one = createCpuBackend({ matmulThreads: 1, matmulFma: 'off' });
    const three = createCpuBackend({ matmulThreads: 3, matmulFma: 'off' });
    try {
      expect(await three.startMatmulThreads()).toBe(3);
      // 4.5 MiB: a contiguous batch of 4 products of 4 x 16384 x 8 needs 3.8 MiB on one thread
      // (operands, one A and one B panel) and 5.3 on three; the strided q k^T below needs its
      // span and one product's C on one thread, and every product's C (128 KiB) on three.
      const budget = 4.5 * 2 ** 20;
      const small = loadWasmMatmul(undefined, { threads: 3, fma: 'off', maxScratchBytes: budget })!;
      expect(await small.startThreads()).toBe(3);
      (three as unknown as { wasmMatmul: WasmMatmul }).wasmMatmul.dispose();
      (three as unknown as { wasmMatmul: WasmMatmul }).wasmMatmul = small;
      const pool = poolOf(three);
      const [m, k, n] = [4, 16384, 8];
      expect(pool.batchThreads(4, m * k * n)).toBe(3);
      const results: Float32Array[] = [];
      for (const backend of [one, three]) {
        const a = make(backend, 4 * m * k, 31);
        const b = make(backend, 4 * k * n, 32);
        const out = make(backend, 4 * m * n);
        backend.matmul(
          { ...a, shape: [4, m, k] },
          { ...b, shape: [4, k, n] },
          { ...out, shape: [4, m, n] },
          false,
          false,
        );
        results.push((await backend.read(out)) as Float32Array);
        for (const t of [a, b, out]) backend.release(t.storage);
      }
      expect(sameBits(results[1]!, results[0]!)).toBe(true);
      // q k^T of 16 heads of 64 over T 128 from one qkv [4, 128, 3 x 1024] (6 MiB: its rows
      // of q and k come in, 4 MiB), each product 128 x 64 x 128: C for all 64 is 4 MiB.
      const [B, T, C, H] = [4, 128, 1024, 16];
      const hs = C / H;
      const strided: Float32Array[] = [];
      for (const backend of [one, three]) {
        const qkv = make(backend, B * T * 3 * C, 33);
        const out = make(backend, B * H * T * T);
        backend.matmulStrided!(
          { storage: qkv.storage, offset: 0, dtype: 'f32', strides: [T * 3 * C, hs, 3 * C, 1] },
          { storage: qkv.storage, offset: C, dtype: 'f32', strides: [T * 3 * C, hs, 1, 3 * C] },
          { storage: out.storage, offset: 0, dtype: 'f32', strides: [H * T * T, T * T, T, 1] },
          [B, H],
          T,
          hs,
          T,
          false,
        );
        strided.push((await backend.read(out)) as Float32Array);
        for (const t of [qkv, out]) backend.release(t.storage);
      }
      expect(sameBits(strided[1]!, strided[0]!)).toBe(true);
      // Neither call split by product: the workers did no batch chunk.
      expect(pool.batchedByWorkers).toBe(0);
      expect(small.scratchBytes).toBeLessThanOrEqual(budget);
    } finally {
      one.dispose();
      three.dispose();
    }
  });
});

describe('a failure in a batch call on the threads', () => {
  it('names the worker, its error and the batch, and later calls run on the calling thread', async () => {
    const matmul = loadWasmMatmul(undefined, { threads: 2, fma: 'off' }) as WasmMatmul;
    try {
      expect(await matmul.startThreads()).toBe(2);
      const threads = (matmul as unknown as { threads: MatmulThreads }).threads;
      const heap = matmul.reserve(1 << 20)!;
      const bytes = heap.buffer.byteLength;
      // Every product's C far past the module's memory; the calling thread's gemm a stand-in
      // that spins, so the worker claims products and traps on its first store.
      const table = 65536;
      new Int32Array(heap.buffer, table, 128).fill(131072);
      const c = bytes + (1 << 24);
      const spinning: Gemm = () => {
        const end = performance.now() + 5;
        while (performance.now() < end);
      };
      const { pack } = (
        matmul as unknown as { exports: { pack: Parameters<MatmulThreads['batch']>[1] } }
      ).exports;
      const call = {
        table,
        aPack: 262144,
        bPack: 262144 + 32 * 16 * 4,
        region: 32 * 16 * 8,
        c,
        m: 32,
        k: 16,
        n: 32,
        batch: 64,
        mr: 4,
        nr: 8,
        aOuter: 16,
        aInner: 1,
        bOuter: 1,
        bInner: 32,
      };
      let caught: unknown;
      try {
        threads.batch(spinning, pack, new Int32Array(heap.buffer), call, 2);
      } catch (error) {
        caught = error;
      }
      expect(caught).toBeInstanceOf(BackendError);
      expect((caught as Error).message).toMatch(
        new RegExp(
          `^\\[matmul\\] worker thread 1 of 1 failed in a batch of 64 products of 32 x 16 x 32 \\(their table at byte ${table}, C at ${c}, panels from 262144 and 264192, 4096 bytes a thread, 8 products a chunk\\), the module's memory ${bytes} bytes: RuntimeError: memory access out of bounds`,
        ),
      );
      expect(threads.batchThreads(64, 32 * 16 * 32)).toBe(1);
    } finally {
      matmul.dispose();
    }
  });
});
