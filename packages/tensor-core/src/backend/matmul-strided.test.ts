import { describe, expect, it } from 'vitest';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../dtype-convert.js';
import type { DType } from '../dtype.js';
import { createCpuBackend } from '../runtime.js';
import { describeBackends } from '../testing/describe-backends.js';
import { seededValues } from '../testing/reference.js';
import type { Backend, KernelTensor, StridedOperand } from './backend.js';

/**
 * One call: a storage of `aSize` (and `bSize`, unless b shares a's) elements, the views, and out's
 * storage of `outSize` elements, which starts as `outStart` (accumulating).
 */
interface Case {
  name: string;
  batch: number[];
  m: number;
  k: number;
  n: number;
  a: { size: number; offset: number; strides: number[] };
  b:
    | { size: number; offset: number; strides: number[] }
    | { shared: true; offset: number; strides: number[] };
  out: { size: number; offset: number; strides: number[] };
  accumulate: boolean;
}

const CASES: Case[] = [
  {
    // Attention's q k^T: both views of one qkv [B 2, T 5, 3C 3 x 6] (3 heads of 2).
    name: 'q k^T from one qkv',
    batch: [2, 3],
    m: 5,
    k: 2,
    n: 5,
    a: { size: 2 * 5 * 18, offset: 0, strides: [90, 2, 18, 1] },
    b: { shared: true, offset: 6, strides: [90, 2, 1, 18] },
    out: { size: 2 * 3 * 25, offset: 0, strides: [75, 25, 5, 1] },
    accumulate: false,
  },
  {
    // att @ v written into [B, T, C]'s layout (the heads merged).
    name: 'att v into merged heads',
    batch: [2, 3],
    m: 5,
    k: 5,
    n: 2,
    a: { size: 2 * 3 * 25, offset: 0, strides: [75, 25, 5, 1] },
    b: { size: 2 * 5 * 18, offset: 12, strides: [90, 2, 18, 1] },
    out: { size: 2 * 5 * 6, offset: 0, strides: [30, 2, 6, 1] },
    accumulate: false,
  },
  {
    // Heads 64 wide (qkv [2, 3, 3 x 128]): each operand is a third of its span, so only its rows
    // of 128 come in ([Note: the CPU strided matmul]).
    name: 'q k^T from one qkv, heads 64 wide, copied in by rows',
    batch: [2, 2],
    m: 3,
    k: 64,
    n: 3,
    a: { size: 2 * 3 * 384, offset: 0, strides: [1152, 64, 384, 1] },
    b: { shared: true, offset: 128, strides: [1152, 64, 1, 384] },
    out: { size: 2 * 2 * 9, offset: 0, strides: [18, 9, 3, 1] },
    accumulate: false,
  },
  {
    // The gradient of k^T's window (column-major out: computed as its transpose), accumulated.
    name: 'dk^T into a column-major window of qkv, heads 64 wide',
    batch: [2, 2],
    m: 64,
    k: 3,
    n: 3,
    a: { size: 2 * 3 * 384, offset: 0, strides: [1152, 64, 1, 384] },
    b: { size: 2 * 2 * 9, offset: 0, strides: [18, 9, 3, 1] },
    out: { size: 2 * 3 * 384, offset: 128, strides: [1152, 64, 1, 384] },
    accumulate: true,
  },
  {
    // Odd sizes past the 4x8 tile and the 256-deep k blocks, A transposed, no batch dims.
    name: 'odd sizes, A transposed, no batch',
    batch: [],
    m: 7,
    k: 301,
    n: 11,
    a: { size: 301 * 9 + 3, offset: 3, strides: [1, 9] },
    b: { size: 301 * 11 + 1, offset: 1, strides: [11, 1] },
    out: { size: 77, offset: 0, strides: [11, 1] },
    accumulate: false,
  },
  {
    // A batch of 1, B transposed, out with padding between rows and columns.
    name: 'batch 1, B transposed, padded out',
    batch: [1],
    m: 9,
    k: 13,
    n: 6,
    a: { size: 9 * 13, offset: 0, strides: [0, 13, 1] },
    b: { size: 6 * 14, offset: 1, strides: [0, 1, 14] },
    out: { size: 9 * 14, offset: 2, strides: [0, 14, 2] },
    accumulate: false,
  },
  {
    // A repeated over the batch (stride 0) and out accumulated into one matrix over the batch:
    // a weight gradient, every product added in batch order.
    name: 'broadcast A, accumulated out',
    batch: [3],
    m: 4,
    k: 6,
    n: 10,
    a: { size: 24, offset: 0, strides: [0, 6, 1] },
    b: { size: 3 * 60, offset: 0, strides: [60, 10, 1] },
    out: { size: 40, offset: 0, strides: [0, 10, 1] },
    accumulate: true,
  },
];

function view(t: KernelTensor, offset: number, strides: number[]): StridedOperand {
  return { storage: t.storage, offset: t.offset + offset, dtype: t.dtype, strides };
}

function encode(values: number[], dtype: DType): Float32Array | Float64Array | Uint16Array {
  if (dtype === 'f32') return Float32Array.from(values);
  if (dtype === 'f64') return Float64Array.from(values);
  const to = dtype === 'f16' ? f32ToF16Bits : f32ToBf16Bits;
  return Uint16Array.from(values, (v) => to(Math.fround(v)));
}

async function decoded(backend: Backend, t: KernelTensor): Promise<number[]> {
  const raw = await backend.read(t);
  if (!(raw instanceof Uint16Array)) return Array.from(raw as Float32Array);
  const from = t.dtype === 'f16' ? f16BitsToF32 : bf16BitsToF32;
  return Array.from(raw, from);
}

/** Element offsets of a view's [...batch, rows, cols], row-major. */
function offsets(dims: number[], offset: number, strides: number[]): number[] {
  let out = [offset];
  dims.forEach((d, i) => {
    out = out.flatMap((at) => Array.from({ length: d }, (_, j) => at + j * strides[i]!));
  });
  return out;
}

interface Run {
  /** Whether the backend ran the call (false: it declined it, and out is as it was). */
  ran: boolean;
  out: number[];
  /** The same product by the backend's `matmul` on contiguous copies, added as `out` would be. */
  contiguous: number[];
  /** In float64 from the stored inputs. */
  exact: number[];
}

async function run(backend: Backend, c: Case, dtype: DType, seed: number): Promise<Run> {
  const tensor = (size: number, values: number[]): KernelTensor => {
    const t: KernelTensor = {
      storage: backend.allocate(size * 8),
      offset: 0,
      dtype,
      shape: [size],
    };
    backend.write(t, encode(values, dtype));
    return t;
  };
  const aValues = seededValues(c.a.size, seed);
  const a = tensor(c.a.size, aValues);
  const shared = 'shared' in c.b;
  const bValues = shared ? aValues : seededValues((c.b as { size: number }).size, seed + 1);
  const b = shared ? a : tensor((c.b as { size: number }).size, bValues);
  const outStart = seededValues(c.out.size, seed + 2);
  const out = tensor(c.out.size, c.accumulate ? outStart : new Array<number>(c.out.size).fill(0));
  const stored = async (t: KernelTensor) => decoded(backend, t);
  const [as, bs, os] = [await stored(a), await stored(b), await stored(out)];
  const done = backend.matmulStrided!(
    view(a, c.a.offset, c.a.strides),
    view(b, c.b.offset, c.b.strides),
    view(out, c.out.offset, c.out.strides),
    c.batch,
    c.m,
    c.k,
    c.n,
    c.accumulate,
  );
  const result = await stored(out);
  // The same operands copied contiguous, one batched matmul, added into out batch by batch.
  const count = c.batch.reduce((p, d) => p * d, 1);
  const aAt = offsets([...c.batch, c.m, c.k], c.a.offset, c.a.strides);
  const bAt = offsets([...c.batch, c.k, c.n], c.b.offset, c.b.strides);
  const outAt = offsets([...c.batch, c.m, c.n], c.out.offset, c.out.strides);
  const a3 = tensor(
    aAt.length,
    aAt.map((i) => as[i]!),
  );
  const b3 = tensor(
    bAt.length,
    bAt.map((i) => bs[i]!),
  );
  const p3 = tensor(outAt.length, new Array<number>(outAt.length).fill(0));
  backend.matmul(
    { ...a3, shape: [count, c.m, c.k] },
    { ...b3, shape: [count, c.k, c.n] },
    { ...p3, shape: [count, c.m, c.n] },
    false,
    false,
  );
  const products = await stored(p3);
  const round = (v: number) => (dtype === 'f64' ? v : (decodedRound(v, dtype) as number));
  const contiguous = [...os];
  const exact = [...os];
  outAt.forEach((at, e) => {
    contiguous[at] = c.accumulate ? round(contiguous[at]! + products[e]!) : products[e]!;
    const [p, i, j] = [Math.floor(e / (c.m * c.n)), Math.floor(e / c.n) % c.m, e % c.n];
    let sum = 0;
    for (let t = 0; t < c.k; t++) {
      sum += as[aAt[(p * c.m + i) * c.k + t]!]! * bs[bAt[(p * c.k + t) * c.n + j]!]!;
    }
    exact[at] = c.accumulate ? exact[at]! + sum : sum;
  });
  for (const t of [a, b, out, a3, b3, p3]) if (t !== b || !shared) backend.release(t.storage);
  return { ran: done !== false, out: result, contiguous, exact };
}

/** v rounded to the dtype's values (f32 first, as the kernels store). */
function decodedRound(v: number, dtype: DType): number {
  const f = Math.fround(v);
  if (dtype === 'f16') return f16BitsToF32(f32ToF16Bits(f));
  if (dtype === 'bf16') return bf16BitsToF32(f32ToBf16Bits(f));
  return f;
}

const TOLERANCE: Record<DType, number> = { f32: 2e-5, f64: 1e-12, f16: 2e-2, bf16: 1e-1, i32: 0 };

describe('matmulStrided on the CPU backend', () => {
  const seed = 4901;
  console.log(`matmulStrided seed ${seed}`);
  const backends: [string, Backend, DType[]][] = [
    ['WASM', createCpuBackend({ matmulThreads: 1 }), ['f32']],
    ['TypeScript', createCpuBackend({ matmulKernel: 'typescript' }), ['f32', 'f64', 'f16', 'bf16']],
  ];
  for (const [kernel, backend, dtypes] of backends) {
    for (const dtype of dtypes) {
      for (const [index, c] of CASES.entries()) {
        it(`${kernel} ${dtype}: ${c.name} gives matmul's bits on contiguous copies`, async () => {
          const r = await run(backend, c, dtype, seed + 10 * index);
          expect(r.out).toEqual(r.contiguous);
          const scale = Math.max(1, ...r.exact.map(Math.abs));
          const worst = Math.max(...r.out.map((v, i) => Math.abs(v - r.exact[i]!)));
          expect(worst / scale).toBeLessThan(TOLERANCE[dtype]);
        });
      }
    }
  }
});

/**
 * WebGPU's strided matmul ([Note: the WebGPU strided matmul]): the register-tiled kernel reading
 * and writing through the strides gives its own contiguous matmul's bits; it declines a 16-bit
 * output and an accumulation into a window that repeats elements (the ops' fallback runs those).
 */
// Its WebGPU suite is skipped only where no WebGPU adapter is likely (no `webgpu` package, no
// Vulkan driver, no SwiftShader); CI sets WEBSHARD_REQUIRE_WEBGPU=1, where that throws instead
// ([Note: requiring WebGPU in tests] in testing/backends.ts), so it runs there.
describeBackends('matmulStrided on WebGPU', (ctx) => {
  const seed = 4901;
  if (ctx.kind === 'cpu') {
    it('(the CPU backend runs every call: it never declines)', async () => {
      for (const c of CASES) expect((await run(ctx.backend, c, 'f32', seed)).ran).toBe(true);
    });
    return;
  }
  for (const [index, c] of CASES.entries()) {
    const repeats = c.name === 'broadcast A, accumulated out';
    const tiled = () => (ctx.backend as { matmulKernel?: string }).matmulKernel === 'registerTiled';
    it(`f32: ${c.name} ${repeats ? 'is declined' : "gives matmul's bits on contiguous copies"}`, async () => {
      const r = await run(ctx.backend, c, 'f32', seed + 10 * index);
      expect(r.ran).toBe(!repeats && tiled());
      if (!r.ran) return;
      expect(r.out).toEqual(r.contiguous);
      const scale = Math.max(1, ...r.exact.map(Math.abs));
      const worst = Math.max(...r.out.map((v, i) => Math.abs(v - r.exact[i]!)));
      expect(worst / scale).toBeLessThan(TOLERANCE.f32);
    });
  }
  it('f16: declines a 16-bit output, writing nothing', async () => {
    const r = await run(ctx.backend, CASES[0]!, 'f16', seed);
    expect(r.ran).toBe(false);
    expect(r.out.every((v) => v === 0)).toBe(true);
  });
});
