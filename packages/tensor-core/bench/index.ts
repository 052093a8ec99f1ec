/**
 * tensor-core benchmarks: f32 matmul GFLOP/s on WebGPU beside tfjs-backend-webgpu on the same
 * adapter in the same run (tfjs gets `navigator.gpu` from the backend's own `webgpu` instance), the
 * CPU backend at the same sizes beside tfjs-backend-wasm and the CPU backend's TypeScript kernel, and
 * host <-> device transfer GB/s for 64 MiB. Where no WebGPU
 * adapter exists, the WebGPU, tfjs and transfer rows are skipped with a message and the CPU rows
 * still run. Run: `pnpm --filter @webshard/tensor-core bench`.
 */
import { type BenchRow, timeMedian, writeBenchResults } from '@webshard/bench';
import type { Backend, KernelTensor } from '../src/backend/backend.js';
import { createWebGpuBackend, type WebGpuBackend } from '../src/backend/webgpu/webgpu-backend.js';
import { NoAdapterError } from '../src/errors.js';
import { createCpuBackend } from '../src/runtime.js';

const SIZES = [256, 512, 1024];
const CPU_SIZES = [256, 512, 1024];

function tensor(backend: Backend, shape: number[]): KernelTensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return { storage: backend.allocate(n * 4), offset: 0, dtype: 'f32', shape };
}

function randomData(n: number): Float32Array {
  const data = new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = Math.random() * 2 - 1;
  return data;
}

async function matmulMs(backend: Backend, n: number): Promise<number> {
  const a = tensor(backend, [1, n, n]);
  const b = tensor(backend, [1, n, n]);
  const c = tensor(backend, [1, n, n]);
  backend.write(a, randomData(n * n));
  backend.write(b, randomData(n * n));
  const ms = await timeMedian(
    async () => {
      backend.matmul(a, b, c, false, false);
      await backend.read(c);
    },
    { warmup: 2, iterations: n >= 1024 ? 5 : 9, maxMs: 20_000 },
  );
  for (const t of [a, b, c]) backend.release(t.storage);
  return ms;
}

const gflops = (n: number, ms: number) => (2 * n * n * n) / (ms * 1e6);

const rows: BenchRow[] = [];

async function webGpuOrSkip(): Promise<WebGpuBackend | undefined> {
  try {
    return await createWebGpuBackend();
  } catch (error) {
    if (!NoAdapterError.isInstance(error)) throw error;
    console.log(
      `skipping the WebGPU rows (webgpu matmul, tfjs-backend-webgpu, transfers): ${(error as Error).message}`,
    );
    return undefined;
  }
}

const gpu = await webGpuOrSkip();
type Tfjs = typeof import('@tensorflow/tfjs-core');
let tf: Tfjs | undefined;

if (gpu) {
  console.log(`${gpu.description}, matmul kernel ${gpu.matmulKernel}`);
  // tfjs-backend-webgpu on the same `webgpu` instance (it needs the GPU* globals and navigator.gpu).
  const webgpuModule = (await import('webgpu')) as unknown as { globals: object };
  Object.assign(globalThis, webgpuModule.globals);
  Object.defineProperty(globalThis, 'navigator', {
    value: { gpu: gpu.gpu, userAgent: 'node' },
    configurable: true,
  });
  tf = await import('@tensorflow/tfjs-core');
  await import('@tensorflow/tfjs-backend-webgpu');
  await tf.setBackend('webgpu');
  await tf.ready();
}

async function tfjsMs(tf: Tfjs, n: number): Promise<number> {
  const a = tf.tensor2d(randomData(n * n), [n, n]);
  const b = tf.tensor2d(randomData(n * n), [n, n]);
  const ms = await timeMedian(
    async () => {
      const c = tf.matMul(a, b);
      await c.data();
      c.dispose();
    },
    { warmup: 2, iterations: n >= 1024 ? 5 : 9, maxMs: 20_000 },
  );
  a.dispose();
  b.dispose();
  return ms;
}

if (gpu && tf) {
  for (const n of SIZES) {
    const ours = gflops(n, await matmulMs(gpu, n));
    const peer = gflops(n, await tfjsMs(tf, n));
    console.log(
      `matmul n=${n}: webgpu ${ours.toFixed(2)} GFLOP/s, tfjs-backend-webgpu ${peer.toFixed(2)}`,
    );
    rows.push({
      name: `matmul f32 n=${n} (webgpu)`,
      metric: 'throughput',
      value: ours,
      unit: 'GFLOP/s',
      peer: 'tfjs-backend-webgpu 4.22',
      peerValue: peer,
    });
  }
}

// The CPU backend's f32 matmul at the same sizes: the WASM SIMD kernel against tfjs-backend-wasm
// (XNNPACK, SIMD; Node gives it one thread) and against the TypeScript kernel it replaced, in the
// same run. See [Note: the WASM SIMD matmul].
const cpu = createCpuBackend();
const cpuTypescript = createCpuBackend({ matmulKernel: 'typescript' });
console.log(`cpu matmul kernel ${cpu.matmulKernel}`);
tf ??= await import('@tensorflow/tfjs-core');
await import('@tensorflow/tfjs-backend-wasm');
await tf.setBackend('wasm');
await tf.ready();
const tfjsWasmPeer = `tfjs-backend-wasm 4.22 (simd ${tf.env().getBool('WASM_HAS_SIMD_SUPPORT') ? 'on' : 'off'}, threads ${tf.env().getBool('WASM_HAS_MULTITHREAD_SUPPORT') ? 'on' : 'off'})`;
for (const n of CPU_SIZES) {
  const value = gflops(n, await matmulMs(cpu, n));
  const peer = gflops(n, await tfjsMs(tf, n));
  const typescript = gflops(n, await matmulMs(cpuTypescript, n));
  console.log(
    `matmul n=${n}: cpu ${cpu.matmulKernel} ${value.toFixed(2)} GFLOP/s, ${tfjsWasmPeer} ${peer.toFixed(2)}, cpu typescript ${typescript.toFixed(2)}`,
  );
  rows.push({
    name: `matmul f32 n=${n} (cpu backend, ${cpu.matmulKernel})`,
    metric: 'throughput',
    value,
    unit: 'GFLOP/s',
    peer: tfjsWasmPeer,
    peerValue: peer,
  });
  rows.push({
    name: `matmul f32 n=${n} (cpu backend, ${cpu.matmulKernel} vs typescript)`,
    metric: 'throughput',
    value,
    unit: 'GFLOP/s',
    peer: 'the TypeScript kernel, same run',
    peerValue: typescript,
  });
}
cpu.dispose();
cpuTypescript.dispose();

// Transfers, 64 MiB.
if (gpu) {
  const bytes = 64 << 20;
  const big = tensor(gpu, [bytes / 4]);
  const host = randomData(bytes / 4);
  const h2d = await timeMedian(
    async () => {
      gpu.write(big, host);
      await gpu.sync();
    },
    { warmup: 1, iterations: 5 },
  );
  const d2h = await timeMedian(() => gpu.read(big), { warmup: 1, iterations: 5 });
  const into = new Float32Array(bytes / 4);
  const d2hInto = await timeMedian(() => gpu.read(big, into), { warmup: 1, iterations: 5 });
  rows.push({
    name: 'host to device 64 MiB (write + sync)',
    metric: 'bandwidth',
    value: bytes / h2d / 1e6,
    unit: 'GB/s',
  });
  rows.push({
    name: 'device to host 64 MiB (read)',
    metric: 'bandwidth',
    value: bytes / d2h / 1e6,
    unit: 'GB/s',
  });
  // What collectives do with their staging arrays: no fresh 64 MiB host array per read.
  rows.push({
    name: 'device to host 64 MiB (read into a reused array)',
    metric: 'bandwidth',
    value: bytes / d2hInto / 1e6,
    unit: 'GB/s',
  });
  gpu.release(big.storage);
}

// f16 kernels with native storage beside packed storage on the same adapter, where it has
// shader-f16 (lavapipe, real GPUs): an element-wise add (one invocation per element against one
// per word) and a transpose (plain stores against atomicAnd/atomicOr on packed words). These rows
// decide `f16Layout`'s 'auto'.
if (gpu?.capabilities.shaderF16) {
  const native = await createWebGpuBackend({ f16: 'native' });
  const packed = await createWebGpuBackend({ f16: 'packed' });
  const n = 2048;
  const f16Ms = async (backend: Backend, kernel: 'add' | 'transpose') => {
    const make = () => ({
      storage: backend.allocate(n * n * 2),
      offset: 0,
      dtype: 'f16' as const,
      shape: [n, n],
    });
    const [a, b, out] = [make(), make(), make()];
    const bits = Uint16Array.from({ length: n * n }, (_, i) => 0x3c00 + (i % 1024));
    backend.write(a, bits);
    backend.write(b, bits);
    const run =
      kernel === 'add'
        ? () => backend.binary('add', a, b, out)
        : () => backend.copyStrided({ ...a, strides: [1, n] }, { ...out, strides: [n, 1] }, [n, n]);
    const ms = await timeMedian(
      async () => {
        for (let k = 0; k < 10; k++) run();
        await backend.sync();
      },
      { warmup: 2, iterations: 7 },
    );
    for (const t of [a, b, out]) backend.release(t.storage);
    return ms / 10;
  };
  for (const kernel of ['add', 'transpose'] as const) {
    const viaNative = await f16Ms(native, kernel);
    const viaPacked = await f16Ms(packed, kernel);
    // Bytes moved: add reads two operands and writes one; transpose reads one and writes one.
    const bytes = n * n * 2 * (kernel === 'add' ? 3 : 2);
    rows.push({
      name: `f16 ${kernel} ${n}x${n}, native storage (webgpu)`,
      metric: 'bandwidth',
      value: bytes / viaNative / 1e6,
      unit: 'GB/s',
      peer: 'packed storage, same adapter',
      peerValue: bytes / viaPacked / 1e6,
    });
  }
  native.dispose();
  packed.dispose();
}

writeBenchResults('tensor-core', rows);
tf?.engine().reset();
gpu?.dispose();
process.exit(0);
