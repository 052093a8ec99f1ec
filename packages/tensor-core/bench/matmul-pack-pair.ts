/**
 * The WASM matmul's `pack` (matmul-pack-wat.mjs) of this tree against another tree's (a worktree
 * of main, say): both modules assembled from their generators in one process, each shape's packs
 * alternating between them, the faster of three rounds of 60 ms each; and whether the two wrote
 * the same bytes (they must: a pack copies, it never computes). Shapes: the default GPT's
 * operands and n = 1024, A [m, k] and B [k, n] as stored and transposed, and odd sizes with
 * partial panels. Run: `pnpm --filter @webshard/tensor-core exec tsx
 * bench/matmul-pack-pair.ts /path/to/other/packages/tensor-core`.
 */
import { loadavg } from 'node:os';
import wabtInit from 'wabt';
import type { Pack } from '../src/backend/cpu/matmul-worker.js';

interface PackModule {
  memory: WebAssembly.Memory;
  pack: Pack;
}

const other = process.argv[2];
if (other === undefined) {
  console.error('usage: matmul-pack-pair.ts /path/to/other/packages/tensor-core');
  process.exit(2);
}
const wabt = await wabtInit();
async function load(root: string): Promise<PackModule> {
  const { assembleMatmul } = await import(`${root}/src/backend/cpu/matmul-wat.mjs`);
  const { bytes } = assembleMatmul(wabt, { relaxed: false, shared: false });
  const exports = new WebAssembly.Instance(new WebAssembly.Module(bytes), {}).exports;
  const module = exports as unknown as PackModule;
  module.memory.grow(1200);
  const heap = new Float32Array(module.memory.buffer);
  for (let i = 0; i < heap.length; i++) heap[i] = (i % 997) * 0.01 + i * 1e-7;
  return module;
}
const modules = {
  this: await load(new URL('..', import.meta.url).pathname),
  other: await load(other),
};

const SRC = 4096;
const DST = 32 << 20;
// [label, outer, inner, width, strideOuter, strideInner]: A packs outer = m, B outer = n.
const cases: [string, number, number, number, number, number][] = [];
for (const [m, k] of [
  [512, 64],
  [512, 256],
  [64, 512],
  [512, 192],
  [61, 37],
  [1024, 1024],
  // GPT-2's weight gradients at B4 T256: dY^T as A (transposed), 768, 2304 and 3072 outputs.
  [768, 1024],
  [2304, 1024],
  [3072, 1024],
] as const) {
  cases.push(
    [`A ${m} x ${k} as stored`, m, k, 4, k, 1],
    [`A ${m} x ${k} transposed`, m, k, 4, 1, m],
  );
}
for (const [k, n] of [
  [64, 256],
  [256, 64],
  [512, 64],
  [64, 192],
  [37, 61],
  [1024, 1024],
  // GPT-2's: the input X as B of a weight's gradient, a weight as B of dX.
  [1024, 768],
  [1024, 3072],
  [2304, 768],
  [3072, 768],
] as const) {
  cases.push(
    [`B ${k} x ${n} as stored`, n, k, 8, 1, n],
    [`B ${k} x ${n} transposed`, n, k, 8, k, 1],
  );
}
console.log(`load average ${loadavg()[0]!.toFixed(1)}`);
console.log('| pack | this tree | other | other / this | same bytes |');
console.log('| --- | --- | --- | --- | --- |');
for (const [label, outer, inner, width, so, si] of cases) {
  const best = { this: Number.POSITIVE_INFINITY, other: Number.POSITIVE_INFINITY };
  const written = { this: new Float32Array(0), other: new Float32Array(0) };
  const length = Math.ceil(outer / width) * width * inner + 64;
  for (let round = 0; round < 3; round++) {
    for (const name of ['this', 'other'] as const) {
      const module = modules[name];
      new Float32Array(module.memory.buffer, DST, length).fill(-1);
      const start = performance.now();
      let calls = 0;
      while (performance.now() - start < 60) {
        module.pack(SRC, DST, outer, inner, width, so, si);
        calls++;
      }
      best[name] = Math.min(best[name], ((performance.now() - start) / calls) * 1000);
      written[name] = new Float32Array(module.memory.buffer, DST, length).slice();
    }
  }
  const same = written.this.every((v, i) => Object.is(v, written.other[i]));
  console.log(
    `| ${label} | ${best.this.toFixed(1)} us | ${best.other.toFixed(1)} us | ${(best.other / best.this).toFixed(2)}x | ${same} |`,
  );
}
console.log(`load average ${loadavg()[0]!.toFixed(1)}`);
