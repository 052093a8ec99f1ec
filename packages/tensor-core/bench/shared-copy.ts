/**
 * What a copy into and out of a shared WebAssembly memory costs against a plain one ([Note: a
 * shared memory only for threads] in src/backend/cpu/matmul-wasm-load.ts): `TypedArray.set` of an
 * ordinary Float32Array into each memory and back, at the default GPT's operand size (512 x 256
 * floats, 512 KiB) and at GPT-2's (1024 x 768, 3 MiB), the two memories alternating round by
 * round; the faster of 5 rounds of 50 ms each. Run: `pnpm --filter @webshard/tensor-core exec tsx
 * bench/shared-copy.ts`.
 */
import { loadavg } from 'node:os';

const PAGE = 65536;
const ROUNDS = 5;
const ROUND_MS = 50;

function memoryOf(shared: boolean, bytes: number): WebAssembly.Memory {
  const pages = Math.ceil(bytes / PAGE);
  return new WebAssembly.Memory({ initial: pages, maximum: pages, shared });
}

/** Microseconds one call of `copy` takes: the fastest round's mean. */
function time(copy: () => void): number {
  let calls = 0;
  const start = performance.now();
  while (performance.now() - start < ROUND_MS) {
    copy();
    calls++;
  }
  return ((performance.now() - start) * 1000) / calls;
}

console.log(`load ${loadavg()[0]!.toFixed(1)}`);
console.log(
  '| floats | into plain | into shared | out of plain | out of shared | shared / plain |',
);
console.log('| --- | --- | --- | --- | --- | --- |');
for (const floats of [512 * 256, 1024 * 768]) {
  const source = Float32Array.from({ length: floats }, (_, i) => Math.sin(i));
  const back = new Float32Array(floats);
  const views = [false, true].map((shared) => {
    const memory = memoryOf(shared, floats * 4);
    return new Float32Array(memory.buffer, 0, floats);
  });
  const best = [Infinity, Infinity, Infinity, Infinity];
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, view] of views.entries()) {
      best[i] = Math.min(
        best[i]!,
        time(() => view.set(source)),
      );
      best[2 + i] = Math.min(
        best[2 + i]!,
        time(() => back.set(view)),
      );
    }
  }
  const [inPlain, inShared, outPlain, outShared] = best as [number, number, number, number];
  const gbps = (us: number) => ((floats * 4) / us / 1000).toFixed(1);
  const ratio = (inShared + outShared) / (inPlain + outPlain);
  console.log(
    `| ${floats} | ${inPlain.toFixed(1)} us (${gbps(inPlain)} GB/s) | ${inShared.toFixed(1)} us (${gbps(inShared)} GB/s) | ${outPlain.toFixed(1)} us | ${outShared.toFixed(1)} us | ${ratio.toFixed(2)}x |`,
  );
}
