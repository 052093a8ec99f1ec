import { describe, expect, it } from 'vitest';
import type { DType } from '../../dtype.js';
import { mulberry32 } from '../../random/mulberry32.js';
import { webGpuFileBackend } from '../../testing/webgpu-file-backend.js';
import type { BinaryOp, KernelTensor, UnaryOp } from '../backend.js';
import { binaryLaunch, fillLaunch, unaryLaunch, whereLaunch } from './elementwise-kernels.js';

// [Note: element-wise kernels four elements a load]: the quad form computes every element with
// the scalar form's operations, so its bits are the scalar form's. Each op runs twice on the same
// values: with operands and output at offset 0 (quads) and at offset 1 (not a multiple of 4: the
// scalar form), and the two outputs are compared bit for bit (any NaN equal to any NaN).
const file = webGpuFileBackend();
const enabled = file.enabled;
const gpu = () => file.backend();

// Every op, and the compiler says so: a new op is a missing key here.
const EVERY_UNARY: Record<UnaryOp, true> = {
  neg: true,
  abs: true,
  exp: true,
  log: true,
  sqrt: true,
  rsqrt: true,
  tanh: true,
  sigmoid: true,
  relu: true,
  gelu: true,
  geluTanh: true,
  square: true,
  reciprocal: true,
};
const EVERY_BINARY: Record<BinaryOp, true> = {
  add: true,
  sub: true,
  mul: true,
  div: true,
  pow: true,
  maximum: true,
  minimum: true,
  eq: true,
  ne: true,
  lt: true,
  le: true,
  gt: true,
  ge: true,
  reluGrad: true,
  geluGrad: true,
  geluTanhGrad: true,
};
const UNARY = Object.keys(EVERY_UNARY) as UnaryOp[];
const BINARY = Object.keys(EVERY_BINARY) as BinaryOp[];

/** Values with the edges an op can treat differently: signed zeros, infinities, NaN, tiny. */
function values(n: number, seed: number, dtype: DType): Float32Array | Int32Array {
  const random = mulberry32(seed);
  if (dtype === 'i32') return Int32Array.from({ length: n }, () => Math.floor(random() * 41) - 20);
  const edges = [0, -0, 1, -1, Infinity, -Infinity, NaN, 1e-40, -3e38, 0.5];
  return Float32Array.from({ length: n }, (_, i) =>
    i % 7 === 3
      ? edges[((i / 7) % edges.length) | 0]!
      : (random() - 0.5) * 2 ** (random() * 12 - 4),
  );
}

function make(shape: readonly number[], dtype: DType, offset: number): KernelTensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return { storage: gpu().allocate((n + offset) * 4), offset, dtype, shape };
}

/** Whether two outputs agree bit for bit, any NaN matching any NaN. */
function sameBits(a: Float32Array | Int32Array, b: Float32Array | Int32Array): boolean {
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < a.length; i++) {
    if (ua[i] === ub[i]) continue;
    if (!(Number.isNaN(a[i]!) && Number.isNaN(b[i]!))) return false;
  }
  return true;
}

type Input = { shape: readonly number[]; dtype: DType } | number;

/**
 * Runs `run` on tensors at `offset` holding the same values for each input, and returns the
 * output and the launch's form ('q' quads, 'v' scalar) as the kernel builds it.
 */
async function runAt(
  offset: number,
  inputs: readonly Input[],
  out: { shape: readonly number[]; dtype: DType },
  run: (xs: (KernelTensor | number)[], o: KernelTensor) => void,
): Promise<Float32Array | Int32Array> {
  const xs = inputs.map((x, k) => {
    if (typeof x === 'number') return x;
    const t = make(x.shape, x.dtype, offset);
    gpu().write(
      t,
      values(
        x.shape.reduce((a, b) => a * b, 1),
        100 + k,
        x.dtype,
      ),
    );
    return t;
  });
  const o = make(out.shape, out.dtype, offset);
  run(xs, o);
  const result = await gpu().read(o);
  for (const x of [...xs, o]) if (typeof x !== 'number') gpu().release(x.storage);
  return result as Float32Array | Int32Array;
}

/** The form a launch takes: the last part of its program key. */
function form(launch: { program: { key: string } }): string {
  return launch.program.key.slice(launch.program.key.lastIndexOf(':') + 1);
}

const dense = (t: { shape: readonly number[]; dtype: DType }, offset: number) => ({
  storage: { buffer: null, byteSize: 0 },
  offset,
  dtype: t.dtype,
  size: t.shape.reduce((a, b) => a * b, 1),
  shape: t.shape,
});

// [6, 20]: 120 elements, the last workgroup partly empty and its last quad pair cut after one.
const ROWS = [6, 20];
const f32 = (shape: readonly number[]) => ({ shape, dtype: 'f32' as DType });

// Skipped where WebGPU cannot run (no `webgpu` package, or neither lavapipe nor SwiftShader):
// `webGpuTestsEnabled` prints why, and with WEBSHARD_REQUIRE_WEBGPU=1 (as .ci/run sets) that is an
// error instead of a skip, so CI always runs these.
describe.runIf(enabled)('element-wise kernels four elements a load (WebGPU)', () => {
  it('every unary op: the same bits as the scalar form', async () => {
    for (const op of UNARY) {
      const [q, v] = await Promise.all(
        [0, 1].map((off) =>
          runAt(off, [f32(ROWS)], f32(ROWS), ([x], o) => gpu().unary(op, x as KernelTensor, o)),
        ),
      );
      expect(sameBits(q!, v!), op).toBe(true);
    }
    expect(form(unaryLaunch('exp', dense(f32(ROWS), 0), dense(f32(ROWS), 0)))).toBe('q');
    expect(form(unaryLaunch('exp', dense(f32(ROWS), 1), dense(f32(ROWS), 1)))).toBe('v');
  });

  it('every binary op, contiguous, over rows, per row and with a number: the scalar form bits', async () => {
    const cases: [string, Input, Input][] = [
      ['contiguous', f32(ROWS), f32(ROWS)],
      ['a number', f32(ROWS), 0.75],
    ];
    // The broadcasts' reads on the ops whose operands are not interchangeable (each case compiles
    // two pipelines, some 0.1 s each on lavapipe).
    const broadcasts: [string, Input, Input][] = [
      ['a bias over rows', f32(ROWS), f32([20])],
      ['a value per row', f32(ROWS), f32([6, 1])],
      ['a number first', -2, f32(ROWS)],
    ];
    const asymmetric = new Set<BinaryOp>(['sub', 'div', 'pow', 'lt', 'geluGrad']);
    for (const op of BINARY) {
      for (const [name, a, b] of asymmetric.has(op) ? [...cases, ...broadcasts] : cases) {
        const [q, v] = await Promise.all(
          [0, 1].map((off) =>
            runAt(off, [a, b], f32(ROWS), ([x, y], o) => gpu().binary(op, x!, y!, o)),
          ),
        );
        expect(sameBits(q!, v!), `${op}, ${name}`).toBe(true);
      }
    }
    const launch = (off: number, b: { shape: readonly number[]; dtype: DType }) =>
      binaryLaunch('add', dense(f32(ROWS), off), dense(b, off), dense(f32(ROWS), off));
    expect(form(launch(0, f32([20])))).toBe('q');
    expect(form(launch(0, f32([6, 1])))).toBe('q');
    expect(form(launch(1, f32([20])))).toBe('v');
    // Rows of 10: a bias's quads would cross its rows, so the scalar form.
    expect(
      form(
        binaryLaunch('add', dense(f32([4, 10]), 0), dense(f32([10]), 0), dense(f32([4, 10]), 0)),
      ),
    ).toBe('v');
  });

  it('i32 arithmetic and where with an i32 or f32 condition: the scalar form bits', async () => {
    const i32 = (shape: readonly number[]) => ({ shape, dtype: 'i32' as DType });
    for (const op of ['add', 'sub', 'mul', 'maximum', 'lt'] as BinaryOp[]) {
      const [q, v] = await Promise.all(
        [0, 1].map((off) =>
          runAt(off, [i32(ROWS), i32([20])], i32(ROWS), ([x, y], o) => gpu().binary(op, x!, y!, o)),
        ),
      );
      expect(sameBits(q!, v!), op).toBe(true);
    }
    const [qa, va] = await Promise.all(
      [0, 1].map((off) =>
        runAt(off, [i32(ROWS)], i32(ROWS), ([x], o) => gpu().unary('abs', x as KernelTensor, o)),
      ),
    );
    expect(sameBits(qa!, va!)).toBe(true);
    for (const cond of [i32(ROWS), f32([6, 1])]) {
      const [q, v] = await Promise.all(
        [0, 1].map((off) =>
          runAt(off, [cond, f32(ROWS), 3.5], f32(ROWS), ([c, a, b], o) =>
            gpu().where(c as KernelTensor, a!, b!, o),
          ),
        ),
      );
      expect(sameBits(q!, v!), cond.dtype).toBe(true);
    }
    const launch = whereLaunch(dense(i32(ROWS), 0), dense(f32(ROWS), 0), 3.5, dense(f32(ROWS), 0));
    expect(form(launch)).toBe('q');
  });

  it('fill writes every element of a quad, and only its own', async () => {
    const t = make([3, 8], 'f32', 4);
    gpu().write({ ...t, offset: 0, shape: [28] }, new Float32Array(28).fill(-1));
    const view = { ...t, shape: [20] };
    gpu().fill(view, 2.5);
    const all = await gpu().read({ ...t, offset: 0, shape: [28] });
    expect([...all]).toEqual([-1, -1, -1, -1, ...new Array(20).fill(2.5), -1, -1, -1, -1]);
    expect(form(fillLaunch(dense(f32([20]), 4), 2.5))).toBe('q');
    expect(form(fillLaunch(dense(f32([18]), 4), 2.5))).toBe('v');
  });
});
