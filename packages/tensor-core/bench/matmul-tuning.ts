/**
 * Measures register tilings of the WebGPU matmul on the current adapter (select one with
 * VK_ICD_FILENAMES or WEBSHARD_ADAPTER), to fill [Note: matmul tuning per adapter]'s table.
 * Run: `pnpm --filter @webshard/tensor-core exec tsx --conditions=@webshard/source
 * bench/matmul-tuning.ts [n]`. Each candidate: median of 5 after 2 warm-ups, alternated in rounds.
 * `CANDIDATES=large` tries the tiles of 16 and more (what lavapipe's row was chosen from),
 * `CANDIDATES=swiftshader` SwiftShader's list; the default, the smaller tiles.
 */
import type { Backend, KernelTensor } from '../src/backend/backend.js';
import type { MatmulTuning } from '../src/backend/webgpu/matmul.js';
import { createWebGpuBackend } from '../src/backend/webgpu/webgpu-backend.js';

const n = Number(process.argv[2] ?? 1024);
const only = process.argv[3];

function tiled(
  tileM: number,
  tileN: number,
  wx: number,
  wy: number,
  columns: 'blocked' | 'strided',
  vectorLoads = false,
): MatmulTuning {
  return { kernel: 'registerTiled', tileM, tileN, workgroup: [wx, wy], columns, vectorLoads };
}

const CANDIDATES: MatmulTuning[] = (
  process.env.CANDIDATES === 'large'
    ? [
        tiled(8, 4, 8, 8, 'blocked', true),
        tiled(16, 16, 4, 4, 'blocked', true),
        tiled(16, 16, 8, 4, 'blocked', true),
        tiled(16, 32, 4, 4, 'blocked', true),
        tiled(16, 32, 4, 2, 'blocked', true),
        tiled(32, 16, 2, 4, 'blocked', true),
        tiled(24, 16, 4, 4, 'blocked', true),
        tiled(16, 24, 4, 4, 'blocked', true),
      ]
    : process.env.CANDIDATES === 'swiftshader'
      ? [
          tiled(8, 8, 8, 8, 'blocked'),
          tiled(8, 8, 8, 8, 'blocked', true),
          tiled(16, 8, 8, 1, 'strided', true),
          tiled(16, 8, 8, 4, 'blocked', true),
          tiled(8, 16, 8, 4, 'blocked', true),
          tiled(16, 16, 4, 4, 'blocked', true),
          tiled(8, 8, 4, 4, 'blocked', true),
        ]
      : [
          tiled(8, 8, 8, 8, 'blocked'),
          tiled(8, 8, 8, 8, 'blocked', true),
          tiled(8, 4, 8, 8, 'blocked', true),
          tiled(4, 4, 8, 8, 'blocked', true),
          tiled(4, 4, 16, 16, 'blocked', true),
          tiled(8, 4, 16, 4, 'blocked', true),
          tiled(8, 4, 8, 1, 'blocked', true),
          tiled(4, 8, 8, 8, 'strided', true),
          tiled(8, 4, 32, 2, 'blocked', true),
          tiled(16, 4, 8, 8, 'blocked', true),
        ]
) as MatmulTuning[];

const name = (t: MatmulTuning) =>
  t.kernel === 'sharedMemory'
    ? 'shared'
    : `${t.tileM}x${t.tileN} wg ${t.workgroup[0]}x${t.workgroup[1]} ${t.columns}${t.vectorLoads ? ' vec4' : ''}`;

function tensor(backend: Backend, shape: number[]): KernelTensor {
  const size = shape.reduce((a, b) => a * b, 1);
  return { storage: backend.allocate(size * 4), offset: 0, dtype: 'f32', shape };
}

const backends = [];
for (const t of CANDIDATES) {
  if (only && !name(t).includes(only)) continue;
  backends.push({ t, backend: await createWebGpuBackend({ matmulTuning: t }) });
}
console.log(backends[0]?.backend.description);
const data = Float32Array.from({ length: n * n }, () => Math.random() * 2 - 1);
const times = new Map<string, number[]>();
const setups = backends.map(({ t, backend }) => {
  const a = tensor(backend, [1, n, n]);
  const b = tensor(backend, [1, n, n]);
  const c = tensor(backend, [1, n, n]);
  backend.write(a, data);
  backend.write(b, data);
  return { t, backend, a, b, c };
});
for (const s of setups) {
  for (let i = 0; i < 2; i++) {
    s.backend.matmul(s.a, s.b, s.c, false, false);
    await s.backend.read(s.c);
  }
}
for (let round = 0; round < 5; round++) {
  for (const s of setups) {
    const start = performance.now();
    s.backend.matmul(s.a, s.b, s.c, false, false);
    await s.backend.read(s.c);
    const list = times.get(name(s.t)) ?? [];
    list.push(performance.now() - start);
    times.set(name(s.t), list);
  }
}
for (const [key, list] of times) {
  const sorted = [...list].sort((x, y) => x - y);
  const ms = sorted[Math.floor(sorted.length / 2)] as number;
  console.log(
    `${key.padEnd(32)} ${((2 * n ** 3) / (ms * 1e6)).toFixed(2)} GFLOP/s (median ${ms.toFixed(1)} ms)`,
  );
}
for (const s of setups) s.backend.dispose();
process.exit(0);
