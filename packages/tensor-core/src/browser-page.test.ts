import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleForBrowser } from '@webshard/test-config/browser-bundle';
import { openPage, skipWithoutChromium } from '@webshard/test-config/browser-page';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const here = dirname(fileURLToPath(import.meta.url));

/** What the page reports: matmul's result and the backend's kind, or the error it threw. */
interface PageResult {
  kind?: string;
  values?: number[];
  error?: { name: string; message: string };
}

// Imports the browser bundle of the root entry and runs a 2x3 by 3x2 matmul on a backend.
const PAGE = `<!doctype html><title>tensor-core</title><script type="module">
import * as tc from '/tensor-core.js';
window.runMatmul = async (kind) => {
  try {
    const backend = await tc.createBackend({ kind });
    const a = tc.tensor([[1, 2, 3], [4, 5, 6]], { backend });
    const b = tc.tensor([[1, 0], [0, 1], [1, -1]], { backend });
    return { kind: backend.kind, values: Array.from(await tc.matmul(a, b).read()) };
  } catch (e) {
    return { error: { name: e.name, message: e.message } };
  }
};
// The CPU matmul on its worker threads (Web Workers over shared memory, where the page is
// cross-origin isolated) against one thread, on a product large enough to split.
window.runThreads = async () => {
  const n = 192;
  const data = Float32Array.from({ length: n * n }, (_, i) => Math.sin(i * 0.37));
  const product = async (backend) => {
    const a = tc.tensor(data, { backend, shape: [n, n] });
    const b = tc.transpose(tc.tensor(data, { backend, shape: [n, n] }), 0, 1);
    return Array.from(await tc.matmul(a, b).read());
  };
  const many = tc.createCpuBackend();
  const threads = await many.startMatmulThreads();
  const one = tc.createCpuBackend({ matmulThreads: 1 });
  const [x, y] = [await product(many), await product(one)];
  many.dispose();
  one.dispose();
  return { isolated: self.crossOriginIsolated, threads, same: x.every((v, i) => Object.is(v, y[i])), first: x[0] };
};
// Attention's heads in one call ([Note: attention's heads in one call]) on the worker threads
// against the same layer on one thread, forward and backward, until a worker has done a chunk.
window.runAttention = async () => {
  const layer = async (backend) => {
    const generator = new tc.RandomGenerator(3);
    const attn = new tc.CausalSelfAttention({ nEmbd: 64, nHead: 4, backend, generator });
    const x = tc.randn([16, 32, 64], { backend, generator });
    x.requiresGrad = true;
    const y = attn.call(x);
    await y.backward(tc.randn([16, 32, 64], { backend, generator }));
    return [...(await y.read()), ...(await x.grad.read())];
  };
  const many = tc.createCpuBackend();
  const threads = await many.startMatmulThreads();
  const one = tc.createCpuBackend({ matmulThreads: 1 });
  const expected = await layer(one);
  const pool = many.wasmMatmul.threads;
  let same = true;
  for (let call = 0; call < 100 && pool.attendedByWorkers === 0; call++) {
    const got = await layer(many);
    same &&= got.every((v, i) => Object.is(v, expected[i]));
  }
  const byWorkers = pool.attendedByWorkers;
  many.dispose();
  one.dispose();
  return { threads, same, byWorkers };
};
window.ready = true;
</script>`;
const EXPECTED = [4, -1, 10, -1];

type Opened = Awaited<ReturnType<typeof openPage>>;

/** What makes a page cross-origin isolated (so it has SharedArrayBuffer). */
const ISOLATED = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
};

async function open(
  code: string,
  initScript?: string,
  headers?: Record<string, string>,
): Promise<Opened> {
  const opened = await openPage(
    {
      '/': { type: 'text/html', body: PAGE },
      '/tensor-core.js': { type: 'text/javascript', body: code },
    },
    { ...(initScript === undefined ? {} : { initScript }), ...(headers ? { headers } : {}) },
  );
  await opened.page.waitForFunction(() => (window as { ready?: boolean }).ready === true);
  return opened;
}

function runMatmul(opened: Opened, kind: 'cpu' | 'webgpu'): Promise<PageResult> {
  return opened.page.evaluate(
    (k) => (window as unknown as { runMatmul(k: string): Promise<PageResult> }).runMatmul(k),
    kind,
  );
}

describe.skipIf(skipWithoutChromium('browser-page.test.ts'))(
  'the browser bundle in headless Chromium',
  () => {
    let code = '';
    let opened: Opened | undefined;

    beforeAll(async () => {
      const bundle = await bundleForBrowser(join(here, 'index.ts'), dirname(here));
      expect(bundle.nodeImports).toEqual([]);
      code = bundle.code;
      opened = await open(code);
    }, 120_000);

    afterAll(async () => {
      await opened?.close();
    });

    it('runs matmul on the CPU backend in a page', async () => {
      expect(await runMatmul(opened!, 'cpu')).toEqual({ kind: 'cpu', values: EXPECTED });
      expect(opened!.errors).toEqual([]);
    });

    it('runs matmul on WebGPU in a page (--enable-unsafe-webgpu), or says how to enable it', async () => {
      const result = await runMatmul(opened!, 'webgpu');
      if (result.error?.name === 'NoAdapterError' && process.env.WEBSHARD_REQUIRE_WEBGPU !== '1') {
        // This Chromium gives no adapter (no Vulkan or SwiftShader): the error must still be the
        // page's, not Node's.
        console.warn(`browser-page.test.ts: no WebGPU in this Chromium: ${result.error.message}`);
        expect(result.error.message).toContain('--enable-unsafe-webgpu');
        return;
      }
      expect(result).toEqual({ kind: 'webgpu', values: EXPECTED });
    });

    it('runs the CPU matmul on Web Workers in a cross-origin-isolated page, with the bits of one thread', async () => {
      interface Threads {
        isolated: boolean;
        threads: number;
        same: boolean;
        first: number;
      }
      const run = (o: Opened) =>
        o.page.evaluate(() =>
          (window as unknown as { runThreads(): Promise<Threads> }).runThreads(),
        );
      const isolated = await open(code, undefined, ISOLATED);
      try {
        const result = await run(isolated);
        expect(result.isolated).toBe(true);
        // Chromium reports the machine's cores; a 1-core machine has no second thread to start.
        const cores = await isolated.page.evaluate(() => navigator.hardwareConcurrency);
        expect(result.threads).toBe(Math.min(cores, 8));
        expect(result.same).toBe(true);
        expect(isolated.errors).toEqual([]);
      } finally {
        await isolated.close();
      }
      // Not isolated (the page opened in beforeAll): no shared memory, one thread, same numbers.
      const plain = await run(opened!);
      expect(plain).toMatchObject({ isolated: false, threads: 1, same: true });
    }, 120_000);

    it("runs attention's heads in one call on the Web Workers, with the bits of one thread", async () => {
      interface Attention {
        threads: number;
        same: boolean;
        byWorkers: number;
      }
      const isolated = await open(code, undefined, ISOLATED);
      try {
        const result = await isolated.page.evaluate(() =>
          (window as unknown as { runAttention(): Promise<Attention> }).runAttention(),
        );
        expect(result.same).toBe(true);
        // The attention calls' chunks on a worker (a 1-core machine has none to take one).
        if (result.threads > 1) expect(result.byWorkers).toBeGreaterThan(0);
        expect(isolated.errors).toEqual([]);
      } finally {
        await isolated.close();
      }
    }, 120_000);

    it('a page whose navigator.gpu gives no adapter gets NoAdapterError saying how to enable WebGPU', async () => {
      const noAdapter = await open(code, 'navigator.gpu.requestAdapter = async () => null;');
      try {
        const result = await runMatmul(noAdapter, 'webgpu');
        expect(result.error?.name).toBe('NoAdapterError');
        expect(result.error?.message).toContain('The browser has WebGPU but gave no adapter');
        expect(result.error?.message).toContain('chrome://flags/#enable-unsafe-webgpu');
        expect(result.error?.message).not.toMatch(/npm install|apt-get/);
      } finally {
        await noAdapter.close();
      }
    });
  },
);
