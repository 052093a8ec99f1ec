/**
 * The attention's heads read through strides (`attendHeads`, [Note: matmul over strided views])
 * against the same attention with its heads split and merged by copies (as before: the tests'
 * `attendHeadsWithCopies`), forward and backward from qkv [B, T, 3C] to y [B, T, C], at the
 * default GPT's size and GPT-2's, calls alternating in one process, medians. The linear layers
 * around them are left out (the same in both). Called by `bench/index.ts`; alone:
 * `pnpm --filter @webshard/tensor-core exec tsx --conditions=@webshard/source bench/attention-heads.ts`.
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

const SIZES: { b: number; t: number; c: number; heads: number; calls: number }[] = [
  { b: 16, t: 32, c: 64, heads: 4, calls: 200 },
  { b: 4, t: 256, c: 768, heads: 12, calls: 8 },
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

export async function attentionHeadRows(): Promise<BenchRow[]> {
  const backend = createCpuBackend();
  const rows: BenchRow[] = [];
  for (const { b, t, c, heads, calls } of SIZES) {
    const qkv = randn([b, t, 3 * c], { backend, generator: new RandomGenerator(1) });
    qkv.requiresGrad = true;
    const g = randn([b, t, c], { backend, generator: new RandomGenerator(2) });
    const above = Array.from({ length: t * t }, (_, i) => (i % t > Math.floor(i / t) ? 1 : 0));
    const mask = tensor(above, { backend, shape: [t, t] });
    const strided = (x: Tensor) => attendHeads(x, heads, mask);
    const copied = (x: Tensor) => attendHeadsWithCopies(x, heads, mask);
    const ours: number[] = [];
    const peer: number[] = [];
    for (let i = 0; i < 3; i++) {
      await timeOne(backend, qkv, g, strided);
      await timeOne(backend, qkv, g, copied);
    }
    for (let i = 0; i < calls; i++) {
      ours.push(await timeOne(backend, qkv, g, strided));
      peer.push(await timeOne(backend, qkv, g, copied));
    }
    const row: BenchRow = {
      name: `attention heads forward + backward [${b}, ${t}, ${c}], ${heads} heads (strided views vs head copies)`,
      metric: 'time',
      value: median(ours),
      unit: 'ms',
      peer: 'head copies (before)',
      peerValue: median(peer),
    };
    console.log(
      `${row.name}: ${row.value.toFixed(3)} ms vs ${row.peerValue!.toFixed(3)} ms, ratio ${(row.value / row.peerValue!).toFixed(3)}, load ${loadavg()[0]!.toFixed(1)}`,
    );
    rows.push(row);
    for (const x of [qkv, g, mask]) x.free();
  }
  backend.dispose();
  return rows;
}

if (import.meta.url === `file://${process.argv[1]}`) await attentionHeadRows();
