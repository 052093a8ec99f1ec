/**
 * Variants of the CPU backend's WASM SIMD matmul on ONE thread, against tfjs-backend-wasm (XNNPACK,
 * SIMD, one thread in Node) in the same process, calls alternating: the measurements behind
 * [Note: the WASM SIMD matmul]'s choices. Each variant is assembled from matmul-wat.mjs with wabt;
 * a call is what the backend does (copy A and B into the module's memory, pack both, gemm, copy C
 * out), and the gemm alone is timed inside it. Every variant's C is checked bit for bit against the
 * shipped one's (they all sum in k order). Prints the load average before and after: the machines
 * are shared, so compare within one run.
 * Run: `pnpm --filter @webshard/tensor-core exec tsx --conditions=@webshard/source
 * bench/matmul-wasm-tiles.ts [n,n,...] [rounds] [variant names, comma-separated]`.
 */
import { loadavg } from 'node:os';
import { setFlagsFromString } from 'node:v8';
import { median } from '@webshard/bench';
import wabtInit from 'wabt';
import type { MatmulExports } from '../src/backend/cpu/matmul-wasm.js';
import {
  assembleMatmul,
  MATMUL_DEFAULTS,
  type MatmulWatOptions,
} from '../src/backend/cpu/matmul-wat.mjs';

const sizes = (process.argv[2] ?? '256,512,1024').split(',').map(Number);
const rounds = Number(process.argv[3] ?? 9);

const VARIANTS: Record<string, MatmulWatOptions> = {
  shipped: {},
  'before (k unrolled 4, scalar pack)': { unroll: 4, simdPack: false },
  'k unrolled 4': { unroll: 4 },
  'k unrolled 2': { unroll: 2 },
  'scalar pack': { simdPack: false },
  '2x16 tile': { mr: 2, nr: 16 },
  '6x8 tile': { mr: 6, mc: 60 },
  '5x8 tile': { mr: 5, mc: 60 },
  '8x8 tile, shuffled splats': { mr: 8, splat: 'shuffle' },
  'shuffled splats': { splat: 'shuffle' },
  'kc 512': { kc: 512 },
  'mc 128': { mc: 128 },
  // Relaxed SIMD's fused multiply-add ([Note: relaxed FMA, chosen once per job]): no product
  // register, so larger tiles fit V8's 15 xmm registers. Their bits differ from the unfused ones.
  'fma 4x8': { relaxed: true },
  'fma 6x8': { relaxed: true, mr: 6, mc: 60 },
  'fma 5x8': { relaxed: true, mr: 5, mc: 60 },
  'fma 4x12': { relaxed: true, nr: 12 },
  'fma 3x16': { relaxed: true, mr: 3, nr: 16, mc: 63 },
  'fma 6x8, k blocks of 512': { relaxed: true, mr: 6, mc: 60, kc: 512 },
  // Fewer loop instructions per multiply-add: on x64 the loop's integer adds and compare share
  // ports 0 and 1 with the FMAs, and 8 accumulators are exactly the FMA latency times its ports.
  'fma 4x8 k unrolled 2': { relaxed: true, unroll: 2 },
  'fma 4x8 k unrolled 4': { relaxed: true, unroll: 4 },
  'fma 5x8 k unrolled 2': { relaxed: true, mr: 5, mc: 60, unroll: 2 },
  'fma 3x12': { relaxed: true, mr: 3, nr: 12, mc: 63 },
  'fma 3x12 k unrolled 2': { relaxed: true, mr: 3, nr: 12, mc: 63, unroll: 2 },
};
const only = process.argv[4]?.split(',');
const chosen = Object.entries(VARIANTS).filter(
  ([name]) => name === 'shipped' || only === undefined || only.includes(name),
);

setFlagsFromString('--experimental-wasm-relaxed-simd');
const wabt = await wabtInit();
function compile(options: MatmulWatOptions): {
  module: WebAssembly.Module;
  mr: number;
  nr: number;
  scratch: number;
} {
  const { bytes, mr, nr, scratchBytes } = assembleMatmul(wabt, options);
  return { module: new WebAssembly.Module(bytes), mr, nr, scratch: scratchBytes };
}

/** One square call of a variant on its own instance: the whole call, and the gemm's share. */
function variantCall(options: MatmulWatOptions, a: Float32Array, b: Float32Array, n: number) {
  const { module, mr, nr, scratch } = compile(options);
  const { memory, pack, gemm } = new WebAssembly.Instance(module, {})
    .exports as unknown as MatmulExports;
  const aRaw = scratch;
  const bRaw = aRaw + n * n * 4;
  const aPack = bRaw + n * n * 4;
  const bPack = aPack + Math.ceil(n / mr) * mr * n * 4;
  const c = bPack + Math.ceil(n / nr) * nr * n * 4;
  memory.grow(Math.ceil((c + n * n * 4) / 65536));
  const out = new Float32Array(n * n);
  const gemmMs: number[] = [];
  return {
    gemmMs,
    out,
    call: async () => {
      new Float32Array(memory.buffer, aRaw, n * n).set(a);
      new Float32Array(memory.buffer, bRaw, n * n).set(b);
      pack(aRaw, aPack, n, n, mr, n, 1);
      pack(bRaw, bPack, n, n, nr, 1, n);
      const t0 = performance.now();
      gemm(aPack, bPack, c, n, n, n, 0);
      gemmMs.push(performance.now() - t0);
      out.set(new Float32Array(memory.buffer, c, n * n));
    },
  };
}

const tf = await import('@tensorflow/tfjs-core');
await import('@tensorflow/tfjs-backend-wasm');
await tf.setBackend('wasm');
await tf.ready();
const load = () =>
  loadavg()
    .map((x) => x.toFixed(1))
    .join(' / ');
console.log(`defaults ${JSON.stringify(MATMUL_DEFAULTS)}; load average ${load()} (1 / 5 / 15 min)`);

// V8 tiering: a fresh module's first gemm runs Liftoff's code (a call never tiers up midway).
{
  const n = Math.max(...sizes);
  const a = Float32Array.from({ length: n * n }, () => Math.random() * 2 - 1);
  const first = variantCall({}, a, a, n);
  for (let i = 0; i < 4; i++) await first.call();
  console.log(
    `first calls of a fresh module, n=${n}, gemm alone: ${first.gemmMs.map((ms) => ms.toFixed(1)).join(', ')} ms`,
  );
}

const gflops = (n: number, ms: number) => (2 * n ** 3) / (ms * 1e6);
for (const n of sizes) {
  const a = Float32Array.from({ length: n * n }, () => Math.random() * 2 - 1);
  const b = Float32Array.from({ length: n * n }, () => Math.random() * 2 - 1);
  const contenders = chosen.map(([name, options]) => ({ name, ...variantCall(options, a, b, n) }));
  const ta = tf.tensor2d(a, [n, n]);
  const tb = tf.tensor2d(b, [n, n]);
  const tfjs = async () => {
    const product = tf.matMul(ta, tb);
    await product.data();
    product.dispose();
  };
  const calls = [...contenders.map((c) => c.call), tfjs];
  for (let i = 0; i < 2; i++) for (const call of calls) await call();
  for (const c of contenders) c.gemmMs.length = 0;
  const times = calls.map(() => [] as number[]);
  const before = load();
  for (let r = 0; r < (n >= 1024 ? rounds : rounds * 3); r++) {
    for (const [i, call] of calls.entries()) {
      const t0 = performance.now();
      await call();
      times[i]!.push(performance.now() - t0);
    }
  }
  const tfjsMs = median(times.at(-1)!);
  console.log(
    `\nn=${n} (load ${before} before, ${load()} after): tfjs-backend-wasm ${gflops(n, tfjsMs).toFixed(1)} GFLOP/s`,
  );
  console.log(
    '| variant | call GFLOP/s | / tfjs | gemm alone GFLOP/s | call - gemm (ms): pack, copies | bits |',
  );
  console.log('| --- | --- | --- | --- | --- | --- |');
  const shipped = new Uint32Array(contenders[0]!.out.buffer);
  for (const [i, c] of contenders.entries()) {
    const callMs = median(times[i]!);
    const gemmMs = median(c.gemmMs);
    const bits = new Uint32Array(c.out.buffer);
    let differ = 0;
    for (let e = 0; e < bits.length; e++) if (bits[e] !== shipped[e]) differ++;
    console.log(
      `| ${c.name} | ${gflops(n, callMs).toFixed(1)} | ${(tfjsMs / callMs).toFixed(2)}x | ${gflops(n, gemmMs).toFixed(1)} | ${(callMs - gemmMs).toFixed(2)} | ${differ === 0 ? 'same' : `${differ} differ`} |`,
    );
  }
  ta.dispose();
  tb.dispose();
}
tf.engine().reset();
