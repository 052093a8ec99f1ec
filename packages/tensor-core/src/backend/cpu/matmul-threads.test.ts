import { execFile } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { createCpuBackend } from '../../runtime.js';
import { seededValues } from '../../testing/reference.js';
import type { Backend } from '../backend.js';
import type { CpuBackend } from './cpu-backend.js';
import { type MatmulThreads, PACK_MIN_FLOATS, THREADED_MIN_MACS } from './matmul-threads.js';
import type { MatmulExports } from './matmul-wasm.js';
import { loadWasmMatmul } from './matmul-wasm-load.js';

// Shapes whose every gemm is past the threading threshold, with odd sizes on every axis (edge tiles, uneven splits),
// both operands transposed or not, and batches with a broadcast operand.
const SHAPES = [
  { batchA: 1, batchB: 1, m: 261, k: 257, n: 263 },
  { batchA: 1, batchB: 1, m: 257, k: 300, n: 219 },
  { batchA: 3, batchB: 1, m: 199, k: 297, n: 103 },
  { batchA: 2, batchB: 2, m: 7, k: 2049, n: 603 },
];

async function run(
  backend: Backend,
  s: (typeof SHAPES)[number],
  transposeA: boolean,
  transposeB: boolean,
): Promise<Float32Array> {
  const batch = Math.max(s.batchA, s.batchB);
  const make = (shape: number[], seed?: number) => {
    const size = shape.reduce((x, y) => x * y, 1);
    const t = { storage: backend.allocate(size * 4), offset: 0, dtype: 'f32' as const, shape };
    if (seed !== undefined) backend.write(t, Float32Array.from(seededValues(size, seed, -1, 1)));
    return t;
  };
  const a = make(transposeA ? [s.batchA, s.k, s.m] : [s.batchA, s.m, s.k], s.m + s.k);
  const b = make(transposeB ? [s.batchB, s.n, s.k] : [s.batchB, s.k, s.n], s.n + 3 * s.k);
  const out = make([batch, s.m, s.n]);
  backend.matmul(a, b, out, transposeA, transposeB);
  const result = (await backend.read(out)) as Float32Array;
  for (const t of [a, b, out]) backend.release(t.storage);
  return result;
}

describe('the WASM matmul on several threads', () => {
  const backends = new Map<number, CpuBackend>();
  for (const threads of [1, 2, 3]) {
    backends.set(threads, createCpuBackend({ matmulThreads: threads, matmulFma: 'off' }));
  }
  const typescript = createCpuBackend({ matmulKernel: 'typescript' });
  afterAll(() => {
    for (const b of backends.values()) b.dispose();
    typescript.dispose();
  });

  it('starts the threads it was asked for', async () => {
    expect(await backends.get(1)!.startMatmulThreads()).toBe(1);
    expect(await backends.get(2)!.startMatmulThreads()).toBe(2);
    expect(await backends.get(3)!.startMatmulThreads()).toBe(3);
    for (const s of SHAPES) expect(s.m * s.k * s.n).toBeGreaterThanOrEqual(THREADED_MIN_MACS);
  });

  for (const s of SHAPES) {
    for (const [ta, tb] of [
      [false, false],
      [true, false],
      [false, true],
      [true, true],
    ] as const) {
      it(`gives identical bits on 1, 2 and 3 threads, close to the TypeScript kernel: ${s.batchA}/${s.batchB} x ${s.m}x${s.k}x${s.n}, transposes ${ta} ${tb}`, async () => {
        const one = await run(backends.get(1)!, s, ta, tb);
        expect(await run(backends.get(2)!, s, ta, tb)).toEqual(one);
        expect(await run(backends.get(3)!, s, ta, tb)).toEqual(one);
        const reference = await run(typescript, s, ta, tb);
        // f32 sums of k terms in (-1, 1): well inside (k + 1) 2^-24 sum |a b| <= (k + 1) k 2^-24.
        const tolerance = (s.k + 1) * s.k * 2 ** -24;
        let worst = 0;
        for (let i = 0; i < one.length; i++) {
          worst = Math.max(worst, Math.abs(one[i]! - reference[i]!));
        }
        expect(worst).toBeLessThan(tolerance);
      });
    }
  }

  // Waking a worker for a product of some tens of microseconds saves little, and each product of
  // a batch is a meeting of the threads of its own: under 2^21 multiply-adds a gemm stays here.
  it('splits gemms of 2^21 multiply-adds or more, each batch element on its own', async () => {
    const matmul = loadWasmMatmul(undefined, { threads: 2, fma: 'off' })!;
    try {
      expect(await matmul.startThreads()).toBe(2);
      const pool = (matmul as unknown as { threads: MatmulThreads }).threads;
      expect(THREADED_MIN_MACS).toBe(2 ** 21);
      // The default GPT's products, 512 x 64 x 64 and up: split (issue 49: its step ran every
      // matmul on one thread under the 2^24 bar for a whole call).
      expect(pool.threadsFor(512, 512 * 64 * 64)).toBe(2);
      expect(pool.threadsFor(512, THREADED_MIN_MACS - 1)).toBe(1);
      // Its attention, 64 products of 32 x 16 x 32 in a call: each one on this thread.
      expect(pool.threadsFor(32, 32 * 16 * 32)).toBe(1);
      // GPT-2's attention: 48 products of 256 x 64 x 256 in one call, each split.
      expect(pool.threadsFor(256, 256 * 256 * 64)).toBe(2);
      // Never more threads than register tiles of rows.
      expect(pool.threadsFor(4, THREADED_MIN_MACS)).toBe(1);
    } finally {
      matmul.dispose();
    }
  });

  // Packing was the calling thread's alone (issue 49: 2 threads at 1.54x one at n = 1024).
  it('packs panels on the workers too, with the bits of one pack', async () => {
    const matmul = loadWasmMatmul(undefined, { threads: 3, fma: 'off' })!;
    try {
      expect(await matmul.startThreads()).toBe(3);
      const pool = (matmul as unknown as { threads: MatmulThreads }).threads;
      const exports = (matmul as unknown as { exports: MatmulExports }).exports;
      // A [301, 517] stored and a B [517, 263] transposed, into panels with edge panels.
      const [m, k, n] = [301, 517, 263];
      const heap = matmul.reserve(2048 + 4 * (m * k + n * k) + 4 * (304 * k + 264 * k) * 2)!;
      const aRaw = 2048;
      const bRaw = aRaw + m * k * 4;
      heap.set(seededValues(m * k + n * k, 4902), aRaw / 4);
      const panels = bRaw + n * k * 4;
      const size = (304 + 264) * k;
      const jobs = (at: number) => [
        { src: aRaw, dst: at, outer: m, inner: k, width: 4, strideOuter: k, strideInner: 1 },
        {
          src: bRaw,
          dst: at + 304 * k * 4,
          outer: n,
          inner: k,
          width: 8,
          strideOuter: k,
          strideInner: 1,
        },
      ];
      for (const j of jobs(panels)) {
        exports.pack(j.src, j.dst, j.outer, j.inner, j.width, j.strideOuter, j.strideInner);
      }
      const one = heap.slice(panels / 4, panels / 4 + size);
      // Until a worker has packed a chunk (the calling thread may claim them all while the
      // system has not scheduled the workers yet), each time the same bits.
      const split = panels + size * 4;
      for (let call = 0; call < 1000 && pool.packedByWorkers === 0; call++) {
        heap.fill(Number.NaN, split / 4, split / 4 + size);
        pool.pack(exports.pack, jobs(split), THREADED_MIN_MACS);
        expect(heap.slice(split / 4, split / 4 + size)).toEqual(one);
      }
      expect(pool.packedByWorkers).toBeGreaterThan(0);
      // Under PACK_MIN_FLOATS (an attention product's 256 x 64 panels) this thread packs alone.
      const before = pool.packedByWorkers;
      const small = {
        src: aRaw,
        dst: split,
        outer: 256,
        inner: 64,
        width: 4,
        strideOuter: 64,
        strideInner: 1,
      };
      expect(2 * 256 * 64).toBeLessThan(PACK_MIN_FLOATS);
      for (let call = 0; call < 20; call++) {
        pool.pack(
          exports.pack,
          [small, { ...small, dst: split + 256 * 64 * 4 }],
          48 * 256 * 256 * 64,
        );
      }
      expect(pool.packedByWorkers).toBe(before);
    } finally {
      matmul.dispose();
    }
  });

  it('runs on one thread where worker threads are not wanted', async () => {
    const single = createCpuBackend({ matmulThreads: 1 });
    expect(await single.startMatmulThreads()).toBe(1);
    single.dispose();
  });

  // The bench's first step: with nothing else to do, the process must wait for the workers to
  // start (they were unref'd before they ran, so Node exited with code 13, the await unsettled).
  it('starts its threads in a script whose only work is awaiting them', async () => {
    const script = `
      const { createCpuBackend } = await import(${JSON.stringify(
        fileURLToPath(new URL('../../runtime.ts', import.meta.url)),
      )});
      const backend = createCpuBackend({ matmulThreads: 2 });
      console.log(await backend.startMatmulThreads());
      backend.dispose();
    `;
    const stdout = await new Promise<string>((resolve, reject) => {
      execFile(
        process.execPath,
        ['--conditions=@webshard/source', '--import', 'tsx', '--input-type=module', '-e', script],
        { timeout: 60_000 },
        (error, out) => (error ? reject(error) : resolve(out)),
      );
    });
    expect(stdout.trim()).toBe('2');
  }, 90_000);
});

// A node with tensor-core from source, running `script` (an ES module body); its stdout.
function runScript(script: string, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const source = `const { createCpuBackend } = await import(${JSON.stringify(
    fileURLToPath(new URL('../../runtime.ts', import.meta.url)),
  )});\n${script}`;
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--conditions=@webshard/source', '--import', 'tsx', '--input-type=module', '-e', source],
      { timeout: 60_000, env },
      (error, out) => (error ? reject(error) : resolve(out)),
    );
  });
}

describe('matmul threads in a synchronous training step', () => {
  // A training step calls kernels synchronously between awaits of promises, so the event loop
  // never turns inside it: the workers' online events cannot be what lets a call split. Issue 31's
  // GPT-2 profile ran every matmul on one thread for that reason.
  it('splits large calls once the workers run, with no turn of the event loop', async () => {
    const out = await runScript(`
      const backend = createCpuBackend({ matmulThreads: 2, matmulFma: 'off' });
      const n = 320;
      const t = () => ({ storage: backend.allocate(n * n * 4), offset: 0, dtype: 'f32', shape: [1, n, n] });
      const [a, b, c] = [t(), t(), t()];
      const before = backend.matmulThreadsInUse;
      const started = performance.now();
      let calls = 0;
      // No await in this loop: microtasks only after it.
      while (backend.matmulThreadsInUse === 1 && performance.now() - started < 20000) {
        backend.matmul(a, b, c, false, false);
        calls++;
      }
      console.log(JSON.stringify({ before, after: backend.matmulThreadsInUse, calls }));
      backend.dispose();
    `);
    const { before, after, calls } = JSON.parse(out.trim()) as Record<string, number>;
    expect(before).toBe(1);
    expect(after, `still one thread after ${calls} calls`).toBe(2);
  }, 90_000);

  // [Note: threads per process]: process ranks a launcher started share the machine's cores.
  it("takes the process's share of the cores when a launcher started several", async () => {
    const script = `
      const backend = createCpuBackend({ matmulFma: 'off' });
      console.log(await backend.startMatmulThreads());
      backend.dispose();
    `;
    const cores = availableParallelism();
    const alone = Number(await runScript(script, { ...process.env, LOCAL_WORLD_SIZE: '1' }));
    const shared = Number(
      await runScript(script, { ...process.env, LOCAL_WORLD_SIZE: String(cores) }),
    );
    expect(alone).toBe(Math.min(cores, 16));
    expect(shared).toBe(1);
  }, 90_000);

  // [Note: a shared memory only for threads]: a matmul that can only ever run on the calling
  // thread copies through a memory of its own (a plain memcpy), not a shared one.
  it('takes a shared memory only where the matmul may run on several threads', async () => {
    const runtime = fileURLToPath(new URL('../../runtime.ts', import.meta.url));
    // A worker thread does not inherit `--import tsx`: it loads the sources through tsx's API.
    const tsx = pathToFileURL(
      createRequire(import.meta.url)
        .resolve('tsx/esm/api')
        .replace(/\.cjs$/, '.mjs'),
    ).href;
    const script = `
      const shared = (threads) => {
        const backend = createCpuBackend(threads === undefined ? {} : { matmulThreads: threads });
        const memory = backend.wasmMatmul.memory;
        backend.dispose();
        return memory.buffer instanceof SharedArrayBuffer;
      };
      const { Worker } = await import('node:worker_threads');
      const inWorker = (threads) => new Promise((resolve, reject) => {
        const worker = new Worker(
          \`import(${JSON.stringify(tsx)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(pathToFileURL(runtime).href)}); }).then(({ createCpuBackend }) => {
            const backend = createCpuBackend(\${JSON.stringify(threads === undefined ? {} : { matmulThreads: threads })});
            require('node:worker_threads').parentPort.postMessage(backend.wasmMatmul.memory.buffer instanceof SharedArrayBuffer);
            backend.dispose();
          });\`,
          { eval: true, execArgv: ['--conditions=@webshard/source'] },
        );
        worker.once('message', (m) => { resolve(m); worker.terminate(); });
        worker.once('error', reject);
      });
      console.log(JSON.stringify({
        main: shared(), mainOne: shared(1), mainTwo: shared(2),
        worker: await inWorker(), workerTwo: await inWorker(2),
      }));
    `;
    const cores = availableParallelism();
    const alone = JSON.parse(await runScript(script, { ...process.env, LOCAL_WORLD_SIZE: '1' }));
    expect(alone).toEqual({
      main: cores > 1,
      mainOne: false,
      mainTwo: true,
      worker: false,
      workerTwo: true,
    });
    const ranks = JSON.parse(
      await runScript(script, { ...process.env, LOCAL_WORLD_SIZE: String(cores) }),
    );
    expect(ranks).toEqual({ ...alone, main: false });
  }, 90_000);
});

/*
 * Relaxed SIMD: Node 20's V8 (11.3) rejects relaxed-SIMD opcodes unless its
 * --experimental-wasm-relaxed-simd flag is set; asking for the fused kernel sets it at run time
 * ([Note: relaxed FMA, chosen once per job]), so a plain `node` gets it too.
 */
describe('relaxed SIMD fused multiply-add', () => {
  const script = `
    const { createCpuBackend } = await import(${JSON.stringify(
      fileURLToPath(new URL('../../runtime.ts', import.meta.url)),
    )});
    const backend = createCpuBackend({ matmulThreads: 1, matmulFma: 'auto' });
    const off = createCpuBackend({ matmulThreads: 1, matmulFma: 'off' });
    const byDefault = createCpuBackend({ matmulThreads: 1 });
    const n = 67, k = 301;
    const a = Float32Array.from({ length: n * k }, (_, i) => Math.sin(i) );
    const b = Float32Array.from({ length: k * n }, (_, i) => Math.cos(3 * i));
    const results = [];
    for (const be of [backend, off, byDefault]) {
      const t = (shape, data) => { const x = { storage: be.allocate(shape[0] * shape[1] * shape[2] * 4), offset: 0, dtype: 'f32', shape }; if (data) be.write(x, data); return x; };
      const out = t([1, n, n]);
      be.matmul(t([1, n, k], a), t([1, k, n], b), out, false, false);
      results.push(await be.read(out));
    }
    let fused = 0, worst = 0, defaultFused = 0;
    for (let i = 0; i < n * n; i++) {
      if (results[2][i] !== results[1][i]) defaultFused++;
      // A fused multiply-add rounds once where mul + add round twice: the sums differ somewhere.
      if (results[0][i] !== results[1][i]) fused++;
      worst = Math.max(worst, Math.abs(results[0][i] - results[1][i]));
    }
    console.log(JSON.stringify({ description: backend.description, fused, worst, defaultFused, defaultDescription: byDefault.description }));
  `;
  const runNode = (flags: string[]) =>
    new Promise<{
      description: string;
      fused: number;
      worst: number;
      defaultFused: number;
      defaultDescription: string;
    }>((resolve, reject) => {
      execFile(
        process.execPath,
        [
          ...flags,
          '--conditions=@webshard/source',
          '--import',
          'tsx',
          '--input-type=module',
          '-e',
          script,
        ],
        { timeout: 60_000 },
        (error, stdout) => (error ? reject(error) : resolve(JSON.parse(stdout.trim()))),
      );
    });

  it('runs when asked for, in a plain node (the flag set at run time) and with the flag given, within f32 rounding of the unfused kernel; off by default', async () => {
    for (const flags of [[], ['--experimental-wasm-relaxed-simd']]) {
      const run = await runNode(flags);
      expect(run.description, flags.join(' ')).toContain('relaxed FMA');
      // V8 lowers relaxed_madd to a fused instruction on x64 with FMA3 (every machine CI runs on).
      expect(run.fused).toBeGreaterThan(0);
      expect(run.worst).toBeLessThan(301 * 302 * 2 ** -24);
      // Off unless asked for, even where the engine has it: the trainer asks only where every rank
      // of the job fuses, so all of them compute the same bits.
      expect(run.defaultFused).toBe(0);
      expect(run.defaultDescription).not.toContain('relaxed FMA');
    }
  }, 120_000);
});
