import { describe, expect, it } from 'vitest';
import { bytesPerElement, type DType } from '../../dtype.js';
import { webGpuFileBackend } from '../../testing/webgpu-file-backend.js';
import type { Backend, KernelTensor, ReductionOp } from '../backend.js';
import { reducePasses } from './reduce-kernels.js';

// [Note: reductions in passes]: one long output in passes, everything else as before.
const file = webGpuFileBackend();
const enabled = file.enabled;
const gpu = () => file.backend();

function make(backend: Backend, shape: number[], dtype: DType = 'f32', offset = 0): KernelTensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return { storage: backend.allocate((n + offset) * bytesPerElement(dtype)), offset, dtype, shape };
}

/** The commands `reduce` queued (a dispatch each), and its result. */
async function reduceOn(
  op: ReductionOp,
  x: KernelTensor,
  axis: number,
  out: KernelTensor,
): Promise<{ commands: number; result: number[] }> {
  const recorder = gpu().workRecorder!;
  const work = recorder.record(() => gpu().reduce(op, x, axis, out));
  const commands = work.commands;
  recorder.dispose(work);
  return { commands, result: [...(await gpu().read(out))] };
}

/**
 * The passes' f32 sum in their order: each pass's partial q folds q, q + parts, ... of the
 * previous pass's values; the last folds what is left in order.
 */
function passesF32(values: Float32Array): number {
  let level = values;
  for (const parts of reducePasses('sum', 1, values.length)) {
    const next = new Float32Array(parts);
    for (let q = 0; q < parts; q++) {
      let acc = 0;
      for (let j = q; j < level.length; j += parts) acc = Math.fround(acc + level[j]!);
      next[q] = acc;
    }
    level = next;
  }
  return level[0]!;
}

/** The f32 serial fold, in order (the one-pass kernel's sum). */
function serialF32(values: Float32Array): number {
  let acc = 0;
  for (const v of values) acc = Math.fround(acc + v);
  return acc;
}

// Skipped where WebGPU cannot run (no `webgpu` package or no adapter: lavapipe or SwiftShader);
// `webGpuTestsEnabled` prints why, and with WEBSHARD_REQUIRE_WEBGPU=1 (as .ci/run sets) that is an
// error instead of a skip, so CI always runs these.
describe.runIf(enabled)('reductions in passes (WebGPU)', () => {
  it('plans FAN_IN (256) elements an invocation, pass after pass, from 2^18 elements, for one sum or mean', () => {
    expect(reducePasses('sum', 1, 2 ** 20)).toEqual([4096, 16, 1]);
    // GPT-2's token embedding's gradient (50304 x 768): the clip's largest sum.
    expect(reducePasses('sum', 1, 50304 * 768)).toEqual([150912, 590, 3, 1]);
    expect(reducePasses('mean', 1, 2 ** 18 + 3)).toEqual([1025, 5, 1]);
    expect(reducePasses('sum', 1, 2 ** 18 - 1)).toEqual([1]);
    expect(reducePasses('sum', 4, 2 ** 20)).toEqual([1]);
    expect(reducePasses('max', 1, 2 ** 20)).toEqual([1]);
  });

  it("one sum over 2^20 floats: a dispatch a pass, the passes' bits, nearer the exact sum than the serial fold", async () => {
    const n = 2 ** 20;
    const values = Float32Array.from({ length: n }, (_, i) => 0.1 + ((i * 7919) % 1000) / 1e4);
    const exact = values.reduce((a, v) => a + v, 0);
    const x = make(gpu(), [n], 'f32', 3);
    gpu().write(x, values);
    const { commands, result } = await reduceOn('sum', x, 0, make(gpu(), []));
    expect(commands).toBe(3);
    expect(result[0]).toBe(passesF32(values));
    const serialError = Math.abs(serialF32(values) - exact);
    expect(serialError).toBeGreaterThan(1);
    expect(Math.abs(result[0]! - exact)).toBeLessThan(serialError / 10);
    expect(Math.abs(result[0]! - exact) / exact).toBeLessThan(2 ** -20);
  });

  it('a mean, over the middle axis of [1, 2^18 + 3, 1], and from bf16 into f16', async () => {
    const n = 2 ** 18 + 3;
    const values = Float32Array.from({ length: n }, (_, i) => (i % 17) - 8);
    const exact = values.reduce((a, v) => a + v, 0) / n;
    const x = make(gpu(), [1, n, 1]);
    gpu().write(x, values);
    const f32 = await reduceOn('mean', x, 1, make(gpu(), [1, 1]));
    expect(f32.commands).toBe(3);
    expect(f32.result[0]).toBeCloseTo(exact, 6);
    // Small integers are exact in bf16; the mean is rounded once, to f16.
    const half = make(gpu(), [n], 'bf16');
    gpu().cast(x, half);
    const out = make(gpu(), [], 'f16');
    const mixed = await reduceOn('mean', half, 0, out);
    expect(mixed.commands).toBe(3);
    const decoded = make(gpu(), []);
    gpu().cast(out, decoded);
    expect((await gpu().read(decoded))[0]).toBeCloseTo(exact, 3);
  });

  it('an i32 sum is exact', async () => {
    const n = 2 ** 19 + 11;
    const values = Int32Array.from({ length: n }, (_, i) => ((i * 31) % 2001) - 1000);
    const exact = values.reduce((a, v) => a + v, 0);
    const x = make(gpu(), [n], 'i32');
    gpu().write(x, values);
    const { commands, result } = await reduceOn('sum', x, 0, make(gpu(), [], 'i32'));
    expect(commands).toBe(3);
    expect(result).toEqual([exact]);
  });

  it('several outputs, shorter rows and max keep one pass, with the same sums', async () => {
    const n = 2 ** 18;
    const values = Float32Array.from({ length: 4 * n }, (_, i) => (i % 5) * 0.25);
    const x = make(gpu(), [4, n]);
    gpu().write(x, values);
    const rows = await reduceOn('sum', x, 1, make(gpu(), [4]));
    expect(rows.commands).toBe(1);
    for (let r = 0; r < 4; r++) {
      expect(rows.result[r]).toBe(serialF32(values.subarray(r * n, (r + 1) * n)));
    }
    const short = make(gpu(), [n - 1]);
    gpu().write(short, values.subarray(0, n - 1));
    const shorter = await reduceOn('sum', short, 0, make(gpu(), []));
    expect(shorter.commands).toBe(1);
    expect(shorter.result).toEqual([serialF32(values.subarray(0, n - 1))]);
    const flat = { ...x, shape: [4 * n] };
    const most = await reduceOn('max', flat, 0, make(gpu(), []));
    expect(most).toEqual({ commands: 1, result: [1] });
  });
});
