/**
 * The WebGPU rows of the tensor-core bench for ONE adapter (the one VK_ICD_FILENAMES selects):
 * f32 matmul GFLOP/s beside tfjs-backend-webgpu on the same adapter (tfjs gets `navigator.gpu`
 * from the backend's own `webgpu` instance), alternating ours and tfjs call by call; host <->
 * device transfers of 64 MiB; the largest matmul against the adapter's arithmetic ceiling
 * (`adapter-peak.ts`); f16 native against packed storage where the adapter has shader-f16.
 * `bench/index.ts` runs this once per installed adapter, in a child process each (one Dawn
 * instance per process), and reads the rows from the last line of stdout (JSON).
 */
import { type BenchRow, median, timeMedian } from '@webshard/bench';
import type { Backend, KernelTensor } from '../src/backend/backend.js';
import { createWebGpuBackend } from '../src/backend/webgpu/webgpu-backend.js';
import { matmulTuningFor } from '../src/backend/webgpu/matmul-tuning.js';
import { arithmeticPeakGflops } from './adapter-peak.js';

const SIZES = [256, 512, 1024];
const adapterName = process.argv[2] ?? 'default';

function tensor(backend: Backend, shape: number[], dtype: 'f32' | 'f16' = 'f32'): KernelTensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return { storage: backend.allocate(n * (dtype === 'f32' ? 4 : 2)), offset: 0, dtype, shape };
}

function randomData(n: number): Float32Array {
  const data = new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = Math.random() * 2 - 1;
  return data;
}

const gflops = (n: number, ms: number) => (2 * n * n * n) / (ms * 1e6);
const rows: BenchRow[] = [];
const gpu = await createWebGpuBackend();
const { row: tuningRow } = matmulTuningFor(gpu.adapter.info);
const tuning = gpu.matmulTuning;
const tuningText =
  tuning.kernel === 'sharedMemory'
    ? 'shared memory'
    : `${tuning.tileM}x${tuning.tileN} per invocation, workgroup ${tuning.workgroup.join('x')}${tuning.vectorLoads ? ', vec4' : ''}`;
console.error(`${gpu.description}: matmul tuning row '${tuningRow}' (${tuningText})`);

const webgpuModule = (await import('webgpu')) as unknown as { globals: object };
Object.assign(globalThis, webgpuModule.globals);
Object.defineProperty(globalThis, 'navigator', {
  value: { gpu: gpu.gpu, userAgent: 'node' },
  configurable: true,
});
const tf = await import('@tensorflow/tfjs-core');
await import('@tensorflow/tfjs-backend-webgpu');
await tf.setBackend('webgpu');
await tf.ready();

let largest = 0;
for (const n of SIZES) {
  const a = tensor(gpu, [1, n, n]);
  const b = tensor(gpu, [1, n, n]);
  const c = tensor(gpu, [1, n, n]);
  gpu.write(a, randomData(n * n));
  gpu.write(b, randomData(n * n));
  const ta = tf.tensor2d(randomData(n * n), [n, n]);
  const tb = tf.tensor2d(randomData(n * n), [n, n]);
  const ours = async () => {
    gpu.matmul(a, b, c, false, false);
    await gpu.read(c);
  };
  const theirs = async () => {
    const out = tf.matMul(ta, tb);
    await out.data();
    out.dispose();
  };
  for (let i = 0; i < 2; i++) {
    await ours();
    await theirs();
  }
  // Alternate A and B call by call; the median of each.
  const oursMs: number[] = [];
  const theirsMs: number[] = [];
  const rounds = n >= 1024 ? 5 : 9;
  const started = performance.now();
  for (let i = 0; i < rounds; i++) {
    let t0 = performance.now();
    await ours();
    oursMs.push(performance.now() - t0);
    t0 = performance.now();
    await theirs();
    theirsMs.push(performance.now() - t0);
    if (performance.now() - started > 60_000 && i >= 2) break;
  }
  const value = gflops(n, median(oursMs));
  const peerValue = gflops(n, median(theirsMs));
  console.error(
    `matmul n=${n} (${adapterName}): webgpu ${value.toFixed(2)} GFLOP/s, tfjs-backend-webgpu ${peerValue.toFixed(2)}`,
  );
  rows.push({
    name: `matmul f32 n=${n} (webgpu, ${adapterName}, tuning '${tuningRow}')`,
    metric: 'throughput',
    value,
    unit: 'GFLOP/s',
    peer: 'tfjs-backend-webgpu 4.22, same adapter',
    peerValue,
  });
  for (const t of [a, b, c]) gpu.release(t.storage);
  ta.dispose();
  tb.dispose();
  largest = value;
}

// What the adapter's arithmetic allows any matmul (bench/adapter-peak.ts), and the share of it the
// largest matmul above reached.
{
  const ceiling = await arithmeticPeakGflops(gpu.device, { workgroups: 128, steps: 1024 });
  console.error(`arithmetic ceiling (${adapterName}): ${ceiling.toFixed(2)} GFLOP/s`);
  rows.push({
    name: `matmul f32 n=${SIZES.at(-1)} (webgpu, ${adapterName}), against the adapter's arithmetic ceiling`,
    metric: 'throughput',
    value: largest,
    unit: 'GFLOP/s',
    peer: 'a shader that only multiplies and adds in registers, same adapter',
    peerValue: ceiling,
  });
}

// Transfers, 64 MiB.
{
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
  for (const [name, ms] of [
    ['host to device 64 MiB (write + sync)', h2d],
    ['device to host 64 MiB (read)', d2h],
    ['device to host 64 MiB (read into a reused array)', d2hInto],
  ] as const) {
    rows.push({
      name: `${name}, ${adapterName}`,
      metric: 'bandwidth',
      value: bytes / ms / 1e6,
      unit: 'GB/s',
    });
  }
  gpu.release(big.storage);
}

// f16 kernels with native storage beside packed storage on the same adapter, where it has
// shader-f16 (lavapipe, real GPUs): these rows decide `f16Layout`'s 'auto'.
if (gpu.capabilities.shaderF16) {
  const native = await createWebGpuBackend({ f16: 'native' });
  const packed = await createWebGpuBackend({ f16: 'packed' });
  const n = 2048;
  const f16Ms = async (backend: Backend, kernel: 'add' | 'transpose') => {
    const [a, b, out] = [0, 1, 2].map(() => tensor(backend, [n, n], 'f16')) as KernelTensor[];
    const bits = Uint16Array.from({ length: n * n }, (_, i) => 0x3c00 + (i % 1024));
    backend.write(a!, bits);
    backend.write(b!, bits);
    const run =
      kernel === 'add'
        ? () => backend.binary('add', a!, b!, out!)
        : () =>
            backend.copyStrided({ ...a!, strides: [1, n] }, { ...out!, strides: [n, 1] }, [n, n]);
    const ms = await timeMedian(
      async () => {
        for (let k = 0; k < 10; k++) run();
        await backend.sync();
      },
      { warmup: 2, iterations: 7 },
    );
    for (const t of [a!, b!, out!]) backend.release(t.storage);
    return ms / 10;
  };
  for (const kernel of ['add', 'transpose'] as const) {
    const viaNative = await f16Ms(native, kernel);
    const viaPacked = await f16Ms(packed, kernel);
    const bytes = n * n * 2 * (kernel === 'add' ? 3 : 2);
    rows.push({
      name: `f16 ${kernel} ${n}x${n}, native storage (webgpu, ${adapterName})`,
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

console.log(JSON.stringify(rows));
tf.engine().reset();
gpu.dispose();
process.exit(0);
