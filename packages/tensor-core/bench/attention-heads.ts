/**
 * The attention's heads in one call each way (`attendHeads` on the CPU backend, [Note:
 * attention's heads in one call]) against the heads read through strides by the strided matmuls
 * (the same backend without its `attention` kernels, [Note: matmul over strided views]), and
 * those against the heads split and merged by copies (as before them: the tests'
 * `attendHeadsWithCopies`), forward and backward from qkv [B, T, 3C] to y [B, T, C], at the
 * default GPT's size and GPT-2's, calls alternating in one process, medians. The linear layers
 * around them are left out (the same in all). Called by `bench/index.ts`; alone:
 * `pnpm --filter @webshard/tensor-core exec tsx --conditions=@webshard/source bench/attention-heads.ts`,
 * and with `long` after it the longer sequences the one-call kernel takes (T = 128 to 1024, the
 * measurements behind its MAX_T), which `pnpm bench` leaves out (a minute more).
 */
import { loadavg } from 'node:os';
import { type BenchRow, median } from '@webshard/bench';
import type { Backend } from '../src/backend/backend.js';
import { attendHeads } from '../src/nn/attention.js';
import { randn, tensor } from '../src/ops/index.js';
import { RandomGenerator } from '../src/random/generator.js';
import { createCpuBackend } from '../src/runtime.js';
import type { Tensor } from '../src/tensor.js';
import { attendHeadsWithCopies } from '../src/testing/head-copies.js';
import { withoutKernels } from '../src/testing/without-kernels.js';

const SIZES: { b: number; t: number; c: number; heads: number; calls: number }[] = [
  { b: 16, t: 32, c: 64, heads: 4, calls: 200 },
  { b: 4, t: 256, c: 768, heads: 12, calls: 8 },
];
const LONG: typeof SIZES = [
  { b: 4, t: 128, c: 768, heads: 12, calls: 8 },
  { b: 2, t: 512, c: 768, heads: 12, calls: 4 },
  { b: 1, t: 1024, c: 768, heads: 12, calls: 4 },
];

async function timeOne(
  backend: Backend,
  qkv: Tensor,
  g: Tensor,
  attend: (qkv: Tensor) => Tensor,
): Promise<number> {
  const start = performance.now();
  const y = attend(qkv);
  await y.backward(g);
  await backend.sync();
  const ms = performance.now() - start;
  y.free();
  qkv.grad?.free();
  qkv.grad = null;
  return ms;
}

export async function attentionHeadRows(sizes = SIZES): Promise<BenchRow[]> {
  const backend = createCpuBackend();
  const rows: BenchRow[] = [];
  for (const { b, t, c, heads, calls } of sizes) {
    // Each variant's operands on its own backend (the strided one's through the proxy).
    const variants = [
      { on: backend, attend: attendHeads },
      // Without its one-call kernels: `attendHeads` runs the strided products.
      { on: withoutKernels(backend, ['attention', 'attentionBackward']), attend: attendHeads },
      { on: backend, attend: attendHeadsWithCopies },
    ].map(({ on, attend }) => {
      const qkv = randn([b, t, 3 * c], { backend: on, generator: new RandomGenerator(1) });
      qkv.requiresGrad = true;
      const g = randn([b, t, c], { backend: on, generator: new RandomGenerator(2) });
      const above = Array.from({ length: t * t }, (_, i) => (i % t > Math.floor(i / t) ? 1 : 0));
      const mask = tensor(above, { backend: on, shape: [t, t] });
      return {
        on,
        qkv,
        g,
        mask,
        run: (x: Tensor) => attend(x, heads, mask),
        times: [] as number[],
      };
    });
    for (let i = 0; i < 3 + calls; i++) {
      for (const v of variants) {
        const ms = await timeOne(v.on, v.qkv, v.g, v.run);
        if (i >= 3) v.times.push(ms);
      }
    }
    const [oneCall, strided, copied] = variants.map((v) => median(v.times)) as [
      number,
      number,
      number,
    ];
    const shape = `[${b}, ${t}, ${c}], ${heads} heads`;
    for (const row of [
      {
        name: `attention heads forward + backward ${shape} (one call vs strided views)`,
        metric: 'time',
        value: oneCall,
        unit: 'ms',
        peer: 'strided views (before)',
        peerValue: strided,
      },
      {
        name: `attention heads forward + backward ${shape} (strided views vs head copies)`,
        metric: 'time',
        value: strided,
        unit: 'ms',
        peer: 'head copies (before them)',
        peerValue: copied,
      },
    ] satisfies BenchRow[]) {
      console.log(
        `${row.name}: ${row.value.toFixed(3)} ms vs ${row.peerValue.toFixed(3)} ms, ratio ${(row.value / row.peerValue).toFixed(3)}, load ${loadavg()[0]!.toFixed(1)}`,
      );
      rows.push(row);
    }
    for (const v of variants) for (const x of [v.qkv, v.g, v.mask]) x.free();
  }
  backend.dispose();
  return rows;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  await attentionHeadRows(process.argv[2] === 'long' ? [...SIZES, ...LONG] : SIZES);
}
