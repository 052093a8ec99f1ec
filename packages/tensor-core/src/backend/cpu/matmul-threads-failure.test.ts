import { describe, expect, it } from 'vitest';
import { BackendError } from '../../errors.js';
import { seededValues } from '../../testing/reference.js';
import type { Gemm, MatmulThreads } from './matmul-threads.js';
import type { MatmulExports } from './matmul-wasm.js';
import { loadWasmMatmul } from './matmul-wasm-load.js';

// A chunk that fails on a worker, or on the calling thread, in the WASM matmul's pool (issue 46:
// a 45-minute run died at step 999 with "a worker thread of the WASM matmul trapped" and nothing
// else to read). The calling thread's gemm here is a stand-in that spins, so the workers claim
// chunks; theirs is the module's own.

/** Spins for `ms` on the calling thread (a chunk that takes time, so the workers claim some). */
function spin(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

/** Whether two arrays hold the same bytes (toEqual on half a million floats takes seconds). */
function sameBits(a: Float32Array, b: Float32Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(
    Buffer.from(b.buffer, b.byteOffset, b.byteLength),
  );
}

async function pool() {
  const matmul = loadWasmMatmul(undefined, { threads: 2, fma: 'off' })!;
  expect(await matmul.startThreads()).toBe(2);
  const threads = (matmul as unknown as { threads: MatmulThreads }).threads;
  const exports = (matmul as unknown as { exports: MatmulExports }).exports;
  return { matmul, threads, exports };
}

describe("a failure in the WASM matmul's threads", () => {
  it('names the worker, its error and the call, and later calls run on the calling thread', async () => {
    const { matmul, threads } = await pool();
    try {
      const heap = matmul.reserve(1 << 20)!;
      const bytes = heap.buffer.byteLength;
      // C far past the module's memory: the worker's gemm traps on its first store.
      const [m, k, n] = [512, 64, 64];
      const c = bytes + (1 << 24);
      const calling: Gemm = () => spin(20);
      let caught: unknown;
      try {
        threads.gemm(calling, 0, 0, c, m, k, n);
      } catch (error) {
        caught = error;
      }
      expect(caught).toBeInstanceOf(BackendError);
      const message = (caught as Error).message;
      expect(message).toMatch(
        new RegExp(
          `^\\[matmul\\] worker thread 1 of 1 failed in a gemm of 512 x 64 x 64 \\(A's panels at byte 0, B's at 0, C at ${c}, 64 rows a chunk\\), the module's memory ${bytes} bytes: RuntimeError: memory access out of bounds`,
        ),
      );
      expect(message).toMatch(/the matmul runs on the calling thread from now on\)$/);
      // The pool stopped: later calls, large ones included, run on this thread alone.
      expect(threads.inUse).toBe(1);
      expect(threads.threadsFor(m, m * k * n)).toBe(1);
    } finally {
      matmul.dispose();
    }
  });

  it("names a map call the same way ([Note: GELU on the matmul's threads])", async () => {
    const { matmul, threads } = await pool();
    try {
      const heap = matmul.reserve(1 << 20)!;
      const bytes = heap.buffer.byteLength;
      // The output far past the module's memory: the worker's map traps on its first store.
      const o = bytes + (1 << 24);
      const calling = () => spin(20);
      let caught: unknown;
      try {
        threads.map(calling, calling, 2048, 2048, o, 65536, 4096);
      } catch (error) {
        caught = error;
      }
      expect(caught).toBeInstanceOf(BackendError);
      expect((caught as Error).message).toMatch(
        new RegExp(
          `^\\[matmul\\] worker thread 1 of 1 failed in a map \\(GELU's gradient\\) of 65536 elements \\(x at byte 2048, dy at 2048, the output at ${o}, 4096 a chunk\\), the module's memory ${bytes} bytes: RuntimeError: memory access out of bounds`,
        ),
      );
      expect(threads.mapThreads(65536)).toBe(1);
    } finally {
      matmul.dispose();
    }
  });

  it("throws the calling thread's own error only after the workers are done, and the pool goes on", async () => {
    const { matmul, threads, exports } = await pool();
    try {
      // A [m, k] and B [k, n] packed, then C by the module on one thread: the reference.
      const [m, k, n] = [512, 1024, 1024]; // some 10 ms of the workers' chunks
      const heap = matmul.reserve(4 * (2 * m * k + 2 * k * n + 2 * m * n) + 65536)!;
      const base = 65536; // past every thread's edge tile
      const [aRaw, bRaw] = [base, base + 4 * m * k];
      const [ap, bp] = [bRaw + 4 * k * n, bRaw + 4 * k * n + 4 * m * k];
      const [cOne, cTwo] = [bp + 4 * k * n, bp + 4 * k * n + 4 * m * n];
      heap.set(seededValues(m * k + k * n, 4603), aRaw / 4);
      exports.pack(aRaw, ap, m, k, 4, k, 1);
      exports.pack(bRaw, bp, n, k, 8, 1, n);
      exports.gemm(ap, bp, cOne, m, k, n, 0);
      const one = heap.slice(cOne / 4, cOne / 4 + m * n);
      // The calling thread's first chunk throws while the workers compute theirs.
      const thrown = new Error('a chunk of the calling thread failed');
      let calls = 0;
      const failing: Gemm = () => {
        calls++;
        throw thrown;
      };
      heap.fill(0, cTwo / 4, cTwo / 4 + m * n);
      expect(() => threads.gemm(failing, ap, bp, cTwo, m, k, n)).toThrow(thrown);
      expect(calls).toBe(1);
      // No worker writes C once the error is out: they were waited for.
      const atThrow = heap.slice(cTwo / 4, cTwo / 4 + m * n);
      spin(200);
      expect(sameBits(heap.slice(cTwo / 4, cTwo / 4 + m * n), atThrow)).toBe(true);
      // So this call meets none of the last one's workers: the same bits as one thread, with the
      // pool still in use.
      expect(threads.inUse).toBe(2);
      heap.fill(Number.NaN, cTwo / 4, cTwo / 4 + m * n);
      threads.gemm(exports.gemm, ap, bp, cTwo, m, k, n);
      expect(sameBits(heap.slice(cTwo / 4, cTwo / 4 + m * n), one)).toBe(true);
    } finally {
      matmul.dispose();
    }
  });
});
