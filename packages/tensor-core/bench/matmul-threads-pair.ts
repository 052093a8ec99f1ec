/**
 * The CPU matmul on 2 threads against 1, in this tree and in another (a worktree of main, say),
 * in one process, calls alternating: n = 1024 and GPT-2's linear layers at B4 T256 (1024 rows:
 * c_attn 768 -> 2304, c_fc 768 -> 3072, c_proj 3072 -> 768). Prints GFLOP/s, each tree's 2-thread
 * / 1-thread ratio and this tree's 2 threads against the other's. Medians of `calls` each; the
 * plain module, or with `auto` the fused one (relaxed FMA, the trainer's where every rank fuses).
 * Run: `pnpm --filter @webshard/tensor-core exec tsx --conditions=@webshard/source
 * bench/matmul-threads-pair.ts /path/to/other/packages/tensor-core/src/index.ts [calls] [off|auto]`.
 */
import { loadavg } from 'node:os';
import * as here from '../src/index.js';
import type { Backend, KernelTensor } from '../src/backend/backend.js';

type TensorCore = typeof here;
const [baselinePath, callsArg, fmaArg] = process.argv.slice(2);
if (baselinePath === undefined) {
  console.error(
    'usage: matmul-threads-pair.ts /path/to/other/packages/tensor-core/src/index.ts [calls] [off|auto]',
  );
  process.exit(2);
}
const baseline = (await import(baselinePath)) as TensorCore;
const CALLS = Number(callsArg ?? 15);
const FMA = fmaArg === 'auto' ? 'auto' : 'off';
const SHAPES = [
  { name: 'n = 1024', m: 1024, k: 1024, n: 1024 },
  { name: 'c_attn 1024 x 768 -> 2304', m: 1024, k: 768, n: 2304 },
  { name: 'c_fc 1024 x 768 -> 3072', m: 1024, k: 768, n: 3072 },
  { name: 'c_proj 1024 x 3072 -> 768', m: 1024, k: 3072, n: 768 },
];

interface Case {
  label: string;
  backend: Backend;
  times: number[];
}

async function make(tc: TensorCore, label: string, threads: number): Promise<Case> {
  const backend = tc.createCpuBackend({ matmulThreads: threads, matmulFma: FMA });
  await (backend as unknown as { startMatmulThreads(): Promise<number> }).startMatmulThreads();
  return { label, backend, times: [] };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
for (const s of SHAPES) {
  const cases = [
    await make(here, 'this tree, 1 thread', 1),
    await make(here, 'this tree, 2 threads', 2),
    await make(baseline, 'other tree, 1 thread', 1),
    await make(baseline, 'other tree, 2 threads', 2),
  ];
  const operands = cases.map(({ backend }) => {
    const t = (shape: number[]): KernelTensor => {
      const size = shape.reduce((x, y) => x * y, 1);
      const kt = { storage: backend.allocate(size * 4), offset: 0, dtype: 'f32' as const, shape };
      backend.write(
        kt,
        Float32Array.from({ length: size }, (_, i) => Math.sin(i) * 0.5),
      );
      return kt;
    };
    return [t([1, s.m, s.k]), t([1, s.k, s.n]), t([1, s.m, s.n])] as const;
  });
  for (let call = 0; call < CALLS + 2; call++) {
    cases.forEach((c, i) => {
      const [a, b, out] = operands[i]!;
      const start = performance.now();
      c.backend.matmul(a, b, out, false, false);
      if (call >= 2) c.times.push(performance.now() - start);
    });
  }
  const gflops = (c: Case) => (2 * s.m * s.k * s.n) / (median(c.times) * 1e6);
  const [one, two, oneOther, twoOther] = cases.map(gflops) as [number, number, number, number];
  console.log(
    `${s.name}: this tree ${one.toFixed(1)} / ${two.toFixed(1)} GFLOP/s (1 / 2 threads, ${(two / one).toFixed(2)}x);` +
      ` other ${oneOther.toFixed(1)} / ${twoOther.toFixed(1)} (${(twoOther / oneOther).toFixed(2)}x);` +
      ` 2 threads this / other ${(two / twoOther).toFixed(2)}; load ${loadavg()[0]!.toFixed(1)}`,
  );
  for (const c of cases) c.backend.dispose();
}
