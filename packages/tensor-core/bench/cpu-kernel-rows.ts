/**
 * The CPU backend's WASM SIMD kernels other than matmul ([Note: the WASM SIMD kernels]) at the
 * default GPT train step's sizes (batch 16 x 32 tokens, 64 wide, MLP 256), against the TypeScript
 * kernels (`createCpuBackend({ kernels: 'typescript' })`) and, where it has the op,
 * tfjs-backend-wasm, in the same run, calls alternating. Each timed call includes reading the
 * result back to a host array (tfjs: `dataSync` inside a `tidy` that returns nothing: a `tidy`
 * that returns the typed array walks its elements, 500x slower). Called by `bench/index.ts`.
 */
import type { BenchRow } from '@webshard/bench';
import { median } from '@webshard/bench';
import type * as TfCore from '@tensorflow/tfjs-core';
import type { AdamHyper, Backend, KernelTensor } from '../src/backend/backend.js';
import { createCpuBackend } from '../src/runtime.js';

type Tf = typeof TfCore;

interface KernelCase {
  name: string;
  /** Elements of the main operand (the throughput's numerator). */
  elements: number;
  /** The kernel on a backend, its operands made once; returns the call and its output. */
  make(backend: Backend): { call(): void; out: KernelTensor };
  /** The same op in tfjs, or undefined where it has none. */
  tfjs?(tf: Tf): () => void;
}

function operand(backend: Backend, shape: number[], fill?: (i: number) => number): KernelTensor {
  const count = shape.reduce((x, y) => x * y, 1);
  const t: KernelTensor = { storage: backend.allocate(count * 4), offset: 0, dtype: 'f32', shape };
  backend.write(
    t,
    Float32Array.from({ length: count }, (_, i) => fill?.(i) ?? Math.sin(i) * 2),
  );
  return t;
}

const ROWS = 512;
const HIDDEN = 256;
const ADAM: AdamHyper = {
  lr: 3e-3,
  beta1: 0.9,
  beta2: 0.95,
  eps: 1e-8,
  weightDecay: 0.1,
  step: 10,
  decoupled: true,
  gradScale: 1,
};

const CASES: KernelCase[] = [
  {
    name: `add a bias [${ROWS}, ${HIDDEN}] + [${HIDDEN}]`,
    elements: ROWS * HIDDEN,
    make: (b) => {
      const [x, bias, out] = [
        operand(b, [ROWS, HIDDEN]),
        operand(b, [HIDDEN]),
        operand(b, [ROWS, HIDDEN]),
      ];
      return { call: () => b.binary('add', x, bias, out), out };
    },
    tfjs: (tf) => {
      const [x, bias] = [tf.randomNormal([ROWS, HIDDEN]), tf.randomNormal([HIDDEN])];
      return () =>
        tf.tidy(() => {
          tf.add(x, bias).dataSync();
        });
    },
  },
  {
    name: `mul by a number [${ROWS}, ${HIDDEN}]`,
    elements: ROWS * HIDDEN,
    make: (b) => {
      const [x, out] = [operand(b, [ROWS, HIDDEN]), operand(b, [ROWS, HIDDEN])];
      return { call: () => b.binary('mul', x, 0.125, out), out };
    },
    tfjs: (tf) => {
      const x = tf.randomNormal([ROWS, HIDDEN]);
      return () =>
        tf.tidy(() => {
          tf.mul(x, 0.125).dataSync();
        });
    },
  },
  {
    name: `gelu [${ROWS}, ${HIDDEN}]`,
    elements: ROWS * HIDDEN,
    make: (b) => {
      const [x, out] = [operand(b, [ROWS, HIDDEN]), operand(b, [ROWS, HIDDEN])];
      return { call: () => b.unary('gelu', x, out), out };
    },
  },
  {
    name: `gelu gradient [${ROWS}, ${HIDDEN}]`,
    elements: ROWS * HIDDEN,
    make: (b) => {
      const [x, dy, out] = [
        operand(b, [ROWS, HIDDEN]),
        operand(b, [ROWS, HIDDEN]),
        operand(b, [ROWS, HIDDEN]),
      ];
      return { call: () => b.binary('geluGrad', x, dy, out), out };
    },
  },
  {
    name: 'softmax [2048, 32] (attention rows)',
    elements: 2048 * 32,
    make: (b) => {
      const [x, out] = [operand(b, [2048, 32]), operand(b, [2048, 32])];
      return { call: () => b.softmax(x, out, false), out };
    },
    tfjs: (tf) => {
      const x = tf.randomNormal([2048, 32]);
      return () =>
        tf.tidy(() => {
          tf.softmax(x).dataSync();
        });
    },
  },
  {
    name: `sum over rows [${ROWS}, ${HIDDEN}] -> [${HIDDEN}]`,
    elements: ROWS * HIDDEN,
    make: (b) => {
      const [x, out] = [operand(b, [ROWS, HIDDEN]), operand(b, [HIDDEN])];
      return { call: () => b.reduce('sum', x, 0, out), out };
    },
    tfjs: (tf) => {
      const x = tf.randomNormal([ROWS, HIDDEN]);
      return () =>
        tf.tidy(() => {
          tf.sum(x, 0).dataSync();
        });
    },
  },
  {
    name: `layer norm forward and backward [${ROWS}, 64]`,
    elements: ROWS * 64,
    make: (b) => {
      const t = (shape: number[]) => operand(b, shape);
      const [x, w, bias, out, mean, rstd] = [
        t([ROWS, 64]),
        t([64]),
        t([64]),
        t([ROWS, 64]),
        t([ROWS]),
        t([ROWS]),
      ];
      const [dy, dx, dw, db] = [t([ROWS, 64]), t([ROWS, 64]), t([64]), t([64])];
      return {
        call: () => {
          b.layerNorm(x, w, bias, 1e-5, out, mean, rstd);
          b.layerNormBackward(dy, x, w, mean, rstd, dx, dw, db);
        },
        out: dx,
      };
    },
  },
  {
    name: 'AdamW step, 65536 parameters',
    elements: 65536,
    make: (b) => {
      const [p, g, m] = [operand(b, [65536]), operand(b, [65536]), operand(b, [65536])];
      const v = operand(b, [65536], (i) => Math.abs(Math.sin(i)));
      return { call: () => b.adam(p, g, m, v, ADAM), out: p };
    },
  },
];

/** Medians (ms) of calls that alternate, after two warm-ups each. */
function alternate(calls: (() => unknown)[], rounds: number): number[] {
  for (let i = 0; i < 2; i++) for (const call of calls) call();
  const times = calls.map(() => [] as number[]);
  for (let r = 0; r < rounds; r++) {
    for (const [i, call] of calls.entries()) {
      const t0 = performance.now();
      call();
      times[i]!.push(performance.now() - t0);
    }
  }
  return times.map(median);
}

/** The rows: each kernel against the TypeScript kernel and, where it has the op, tfjs-backend-wasm. */
export async function cpuKernelRows(tf: Tf, tfjsPeer: string): Promise<BenchRow[]> {
  const wasm = createCpuBackend({ matmulThreads: 1 });
  const typescript = createCpuBackend({ matmulThreads: 1, kernels: 'typescript' });
  const rows: BenchRow[] = [];
  const label = `cpu backend, ${wasm.kernels}`;
  for (const c of CASES) {
    const [ours, reference] = [c.make(wasm), c.make(typescript)];
    // The read back, synchronous on the CPU backend (its promise resolves at once).
    const timed = (backend: Backend, k: { call(): void; out: KernelTensor }) => () => {
      k.call();
      void backend.read(k.out);
    };
    const peer = c.tfjs?.(tf);
    const calls = [timed(wasm, ours), timed(typescript, reference), ...(peer ? [peer] : [])];
    const [oursMs, tsMs, peerMs] = alternate(calls, 25);
    const rate = (ms: number) => c.elements / (ms * 1e3);
    console.log(
      `${c.name}: ${label} ${oursMs!.toFixed(3)} ms, typescript ${tsMs!.toFixed(3)} ms${peerMs === undefined ? '' : `, ${tfjsPeer} ${peerMs.toFixed(3)} ms`}`,
    );
    const row = {
      name: `${c.name} (${label})`,
      metric: 'throughput',
      value: rate(oursMs!),
      unit: 'Melem/s',
    };
    rows.push({ ...row, peer: 'the TypeScript kernel, same run', peerValue: rate(tsMs!) });
    if (peerMs !== undefined) rows.push({ ...row, peer: tfjsPeer, peerValue: rate(peerMs) });
  }
  wasm.dispose();
  typescript.dispose();
  return rows;
}
