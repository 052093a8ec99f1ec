import { describe, expect, it } from 'vitest';
import { bytesPerElement, type DType } from '../../dtype.js';
import { IndexError } from '../../errors.js';
import { webGpuFileBackend } from '../../testing/webgpu-file-backend.js';
import type { Backend, KernelTensor } from '../backend.js';
import { runWideCrossEntropy, WIDE_COLS, wideSegments } from './cross-entropy-wide.js';
import { isCpuAdapter } from './gpu-runtime.js';
import type { WebGpuBackend } from './webgpu-backend.js';
import { dense, type LaunchContext } from './webgpu-dispatch.js';

// [Note: cross entropy over wide rows]: rows of WIDE_COLS columns or more go in segments on GPU
// adapters. The segmented kernels are called here directly (CI's adapters are CPU ones, which
// keep the row kernel): against the loss and its gradient in f64, with an ignored row, a bf16
// input and rows of every segment edge; their dispatches; the same bits on every call; a bad
// target's error. And which adapters take them through the backend.
const file = webGpuFileBackend();
const gpu = () => file.backend();

function make(backend: Backend, shape: number[], dtype: DType = 'f32'): KernelTensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return { storage: backend.allocate(n * bytesPerElement(dtype)), offset: 0, dtype, shape };
}

/** The losses and their gradient in f64, for dLosses `dl` (0 for ignored rows). */
function reference(
  x: Float32Array,
  targets: Int32Array,
  dl: number[],
  cols: number,
  ignore: number,
) {
  const rows = targets.length;
  const losses: number[] = [];
  const grad = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    const row = x.subarray(r * cols, (r + 1) * cols);
    if (targets[r] === ignore) {
      losses.push(0);
      continue;
    }
    const m = row.reduce((a, v) => Math.max(a, v), -Infinity);
    const s = row.reduce((a, v) => a + Math.exp(v - m), 0);
    losses.push(m + Math.log(s) - row[targets[r]!]!);
    for (let c = 0; c < cols; c++) {
      grad[r * cols + c] = (Math.exp(row[c]! - m) / s - (c === targets[r] ? 1 : 0)) * dl[r]!;
    }
  }
  return { losses, grad };
}

/** The segmented cross entropy (its gradient where `grad` is given), through the backend's queue. */
function wide(
  logits: KernelTensor,
  targets: KernelTensor,
  losses: KernelTensor,
  grad: { dLosses: KernelTensor; dLogits: KernelTensor } | null = null,
): void {
  const ctx = (gpu() as unknown as { ctx: LaunchContext }).ctx;
  const [rows, cols] = logits.shape as [number, number];
  const backward =
    grad === null ? null : { dLosses: dense(grad.dLosses), dLogits: dense(grad.dLogits) };
  runWideCrossEntropy(
    ctx,
    dense(logits),
    dense(targets),
    dense(losses),
    -100,
    rows,
    cols,
    backward,
  );
}

async function commandsOf(record: () => void): Promise<number> {
  const recorder = gpu().workRecorder!;
  const work = recorder.record(record);
  const commands = work.commands;
  recorder.dispose(work);
  return commands;
}

// Issue 49's kernel. Skipped where WebGPU cannot run (no `webgpu` package or no adapter: lavapipe
// or SwiftShader); `webGpuTestsEnabled` prints why, and with WEBSHARD_REQUIRE_WEBGPU=1 (as .ci/run
// sets) that is an error instead of a skip, so CI always runs these.
describe.runIf(file.enabled)('cross entropy over wide rows (WebGPU)', () => {
  it('matches f64 forward and backward, ignored rows and segment edges included, the same bits every call', async () => {
    const cols = WIDE_COLS + 257; // 10 segments of interleaved columns, 231 in five and 230 in five
    expect(wideSegments(cols)).toBe(10);
    const rows = 4;
    const x = Float32Array.from(
      { length: rows * cols },
      (_, i) => Math.sin(i * 0.37) * 6 + (i % 7),
    );
    const targets = Int32Array.from([0, cols - 1, -100, 2048]);
    const dl = [0.25, -1.5, 0, 2];
    const logits = make(gpu(), [rows, cols]);
    gpu().write(logits, x);
    const t = make(gpu(), [rows], 'i32');
    gpu().write(t, targets);
    const losses = make(gpu(), [rows]);
    expect(await commandsOf(() => wide(logits, t, losses))).toBe(2);
    wide(logits, t, losses);
    const got = [...(await gpu().read(losses))];
    const want = reference(x, targets, dl, cols, -100);
    for (let r = 0; r < rows; r++) expect(Math.abs(got[r]! - want.losses[r]!)).toBeLessThan(2e-5);
    expect(got[2]).toBe(0);
    const dLosses = make(gpu(), [rows]);
    gpu().write(dLosses, Float32Array.from(dl));
    const dLogits = make(gpu(), [rows, cols]);
    const backward = () => wide(logits, t, dLosses, { dLosses, dLogits });
    expect(await commandsOf(backward)).toBe(3);
    backward();
    const grad = (await gpu().read(dLogits)) as Float32Array;
    let worst = 0;
    for (let i = 0; i < grad.length; i++)
      worst = Math.max(worst, Math.abs(grad[i]! - want.grad[i]!));
    expect(worst).toBeLessThan(1e-6);
    expect(grad.subarray(2 * cols, 3 * cols).every((v) => v === 0)).toBe(true);
    // Again: the order is the shape's, so the same bits.
    backward();
    expect(await gpu().read(dLogits)).toEqual(grad);
    wide(logits, t, losses);
    expect([...(await gpu().read(losses))]).toEqual(got);
  });

  it('reads bf16 logits', async () => {
    const cols = WIDE_COLS;
    const x = Float32Array.from({ length: 2 * cols }, (_, i) => (i % 13) - 6);
    const f32 = make(gpu(), [2, cols]);
    gpu().write(f32, x);
    const half = make(gpu(), [2, cols], 'bf16');
    gpu().cast(f32, half);
    const t = make(gpu(), [2], 'i32');
    gpu().write(t, Int32Array.from([5, 100]));
    const losses = make(gpu(), [2]);
    wide(half, t, losses);
    const want = reference(x, Int32Array.from([5, 100]), [1, 1], cols, -100).losses;
    const got = [...(await gpu().read(losses))];
    for (let r = 0; r < 2; r++) expect(Math.abs(got[r]! - want[r]!)).toBeLessThan(2e-5);
  });

  it('is what the backend runs for rows of WIDE_COLS or more on a GPU, and not on a CPU adapter', async () => {
    const t = make(gpu(), [2], 'i32');
    gpu().write(t, Int32Array.from([5, 100]));
    const losses = make(gpu(), [2]);
    const cpuAdapter = isCpuAdapter((gpu() as WebGpuBackend).adapter);
    const dispatches = (cols: number) =>
      commandsOf(() => gpu().crossEntropy(make(gpu(), [2, cols]), t, losses, -100));
    expect(await dispatches(WIDE_COLS)).toBe(cpuAdapter ? 1 : 2);
    expect(await dispatches(WIDE_COLS - 1)).toBe(1);
  });

  it("raises a bad target as the op's IndexError at the next read, forward and backward", async () => {
    const cols = WIDE_COLS;
    const logits = make(gpu(), [1, cols]);
    gpu().write(logits, new Float32Array(cols));
    const t = make(gpu(), [1], 'i32');
    gpu().write(t, Int32Array.from([cols + 5]));
    const losses = make(gpu(), [1]);
    wide(logits, t, losses);
    const error = await gpu()
      .read(losses)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IndexError);
    expect((error as Error).message).toMatch(
      new RegExp(`^\\[crossEntropy\\] index ${cols + 5} is out of range \\[0, ${cols}\\)`),
    );
    const dLosses = make(gpu(), [1]);
    gpu().write(dLosses, Float32Array.from([1]));
    wide(logits, t, dLosses, { dLosses, dLogits: make(gpu(), [1, cols]) });
    await expect(gpu().sync()).rejects.toThrow(
      new RegExp(`^\\[crossEntropyBackward\\] index ${cols + 5} is out of range \\[0, ${cols}\\)`),
    );
  });
});
