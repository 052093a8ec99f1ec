import { afterAll, describe, expect, it } from 'vitest';
import { createCpuBackend } from '../../runtime.js';
import { firstDifference } from '../../testing/first-difference.js';
import { seededValues } from '../../testing/reference.js';
import type { KernelTensor } from '../backend.js';
import type { CpuBackend } from './cpu-backend.js';
import { MAP_MIN_ELEMENTS, type MatmulThreads } from './matmul-threads.js';

// Every edge of GELU and its gradient: NaN, infinities, signed zeros, subnormals, where 1 + erf
// cancels (x near -5.6), both sides of erf's clamp at |x / sqrt 2| = 4, and the largest floats.
const EDGES = [
  Number.NaN,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
  0,
  -0,
  1e-40,
  -1e-40,
  -5.6,
  -5.65,
  5.66,
  -5.66,
  3e38,
  -3e38,
];

function pool(backend: CpuBackend): MatmulThreads {
  return (backend as unknown as { wasmMatmul: { threads: MatmulThreads } }).wasmMatmul.threads;
}

/** An f32 operand of `values` at element `offset` of its own storage. */
function operand(backend: CpuBackend, values: ArrayLike<number>, offset: number): KernelTensor {
  const t = {
    storage: backend.allocate((offset + values.length) * 4),
    offset,
    dtype: 'f32' as const,
    shape: [values.length],
  };
  backend.write(t, Float32Array.from(values));
  return t;
}

/** Bits of `values`, every NaN as one NaN (a NaN's payload is not what a user reads). */
function bits(values: Float32Array): Uint32Array {
  const out = new Uint32Array(
    values.buffer.slice(values.byteOffset, values.byteOffset + values.byteLength),
  );
  for (let i = 0; i < values.length; i++) if (Number.isNaN(values[i])) out[i] = 0x7fc00000;
  return out;
}

/** gelu(x) and dy gelu'(x) on `backend`, the operands at `offset`. */
async function maps(
  backend: CpuBackend,
  x: ArrayLike<number>,
  dy: ArrayLike<number>,
  offset: number,
): Promise<[Uint32Array, Uint32Array]> {
  const [xt, dyt] = [operand(backend, x, offset), operand(backend, dy, offset)];
  const [gelu, grad] = [
    operand(backend, new Float32Array(x.length), offset),
    operand(backend, new Float32Array(x.length), offset),
  ];
  backend.unary('gelu', xt, gelu);
  backend.binary('geluGrad', xt, dyt, grad);
  const out: [Uint32Array, Uint32Array] = [
    bits((await backend.read(gelu)) as Float32Array),
    bits((await backend.read(grad)) as Float32Array),
  ];
  for (const t of [xt, dyt, gelu, grad]) backend.release(t.storage);
  return out;
}

// What gelu-threads.ts's [Note: GELU on the matmul's threads] promises: the one-thread bits.
describe("GELU and its gradient on the matmul's threads", () => {
  const threaded = createCpuBackend({ matmulThreads: 2 });
  const single = createCpuBackend({ matmulThreads: 1 });
  afterAll(() => {
    threaded.dispose();
    single.dispose();
  });

  it("gives the one-thread kernel's bits, the workers computing chunks", async () => {
    expect(await threaded.startMatmulThreads()).toBe(2);
    const workers = pool(threaded);
    // Odd sizes (a tail in the last chunk only), and operands 3 elements into their storage.
    for (const n of [100_003, MAP_MIN_ELEMENTS + 1]) {
      const x = seededValues(n, n, -8, 8);
      x.splice(0, EDGES.length, ...EDGES);
      x.splice(n - EDGES.length, EDGES.length, ...EDGES);
      const dy = seededValues(n, n + 1, -2, 2);
      for (const offset of [0, 3]) {
        const [gelu, grad] = await maps(single, x, dy, offset);
        // Until a worker has computed a chunk (the calling thread may claim them all while the
        // system has not scheduled the worker yet), each time the same bits.
        const before = workers.mappedByWorkers;
        for (let call = 0; call < 200 && workers.mappedByWorkers === before; call++) {
          const [g, d] = await maps(threaded, x, dy, offset);
          expect(firstDifference(g, gelu)).toBe(-1);
          expect(firstDifference(d, grad)).toBe(-1);
        }
        expect(workers.mappedByWorkers).toBeGreaterThan(before);
      }
    }
  });

  it('splits from MAP_MIN_ELEMENTS on, and past a piece of 2^22 elements', async () => {
    expect(await threaded.startMatmulThreads()).toBe(2);
    const workers = pool(threaded);
    expect(workers.mapThreads(MAP_MIN_ELEMENTS - 1)).toBe(1);
    expect(workers.mapThreads(MAP_MIN_ELEMENTS)).toBe(2);
    // Below the bar the kernels module's map runs: no chunk for the workers.
    const small = seededValues(MAP_MIN_ELEMENTS - 1, 7, -8, 8);
    const before = workers.mappedByWorkers;
    const [gelu, grad] = await maps(threaded, small, small, 0);
    expect(workers.mappedByWorkers).toBe(before);
    const [g1, d1] = await maps(single, small, small, 0);
    expect([firstDifference(gelu, g1), firstDifference(grad, d1)]).toEqual([-1, -1]);
    // Two pieces (the second 5 elements): every element written, with the one-thread bits.
    const large = seededValues(2 ** 22 + 5, 11, -8, 8);
    const ones = new Float32Array(large.length).fill(1);
    const [gelu2, grad2] = await maps(threaded, large, ones, 1);
    const [g2, d2] = await maps(single, large, ones, 1);
    expect([firstDifference(gelu2, g2), firstDifference(grad2, d2)]).toEqual([-1, -1]);
  });

  it("leaves the maps to TypeScript where the kernels are TypeScript's", async () => {
    const reference = createCpuBackend({ matmulThreads: 2, kernels: 'typescript' });
    const alone = createCpuBackend({ matmulThreads: 1, kernels: 'typescript' });
    try {
      expect(await reference.startMatmulThreads()).toBe(2);
      const x = seededValues(2 * MAP_MIN_ELEMENTS, 5, -8, 8);
      const dy = seededValues(2 * MAP_MIN_ELEMENTS, 6, -2, 2);
      // The TypeScript kernels' f64 erf and exp, not the f32 lanes' bits.
      const [gelu, grad] = await maps(reference, x, dy, 0);
      const [g, d] = await maps(alone, x, dy, 0);
      expect([firstDifference(gelu, g), firstDifference(grad, d)]).toEqual([-1, -1]);
      expect(pool(reference).mappedByWorkers).toBe(0);
    } finally {
      reference.dispose();
      alone.dispose();
    }
  });
});
