/// <reference types="@webgpu/types" />
import { bytesPerElement, type DType, type HostArray, hostArrayFor } from '../../dtype.js';
import { DTypeError } from '../../errors.js';
import { philoxNormal } from '../../random/philox.js';
import { checkReadTarget, PooledBackend } from '../pooled-backend.js';
import type {
  AdamHyper,
  Backend,
  BackendCapabilities,
  BinaryOp,
  KernelTensor,
  ReductionOp,
  SgdHyper,
  StridedOperand,
  UnaryOp,
  WorkRecorder,
} from '../backend.js';
import { DeviceQueue } from './device-queue.js';
import { webGpuWorkRecorder } from './recorded-work.js';
import { describeAdapter, isCpuAdapter } from './gpu-runtime.js';
import {
  adamLaunch,
  axpyLaunch,
  binaryLaunch,
  checkFiniteLaunch,
  copyLaunch,
  copyStridedLaunch,
  crossEntropyLaunch,
  fillLaunch,
  gatherLaunch,
  layerNormBackwardLaunches,
  layerNormLaunch,
  runReduce,
  scatterAddLaunch,
  sgdLaunch,
  shapeSize,
  softmaxLaunch,
  unaryLaunch,
  whereLaunch,
} from './kernels.js';
import type { MatmulKernel, MatmulTuning } from './matmul.js';
import { runWideCrossEntropy, WIDE_COLS } from './cross-entropy-wide.js';
import { matmulStridedLaunch } from './matmul-strided.js';
import { matmulKernelFromEnv, matmulTuningFor, usableTuning } from './matmul-tuning.js';
import type { Launch } from './program.js';
import { randomUniformLaunch } from './random-kernels.js';
import { Readbacks } from './readback.js';
import {
  deviceAllocator,
  f16Layout,
  openWebGpuDevice,
  type WebGpuBackendOptions,
} from './webgpu-device.js';
import {
  dense,
  denseShaped,
  adamScalars,
  dispatch,
  type LaunchContext,
  operand,
  requireF32State,
  runMatmul,
} from './webgpu-dispatch.js';
import { hostArrayFromF32, stageWrite } from './webgpu-staging.js';

// Setup, staging and dispatch live in their own files; these kept their old module path.
export { type F16Storage, f16Layout, type WebGpuBackendOptions } from './webgpu-device.js';

/**
 * The WebGPU backend: device buffers from a caching allocator, kernels as WGSL programs enqueued in
 * order (see [Note: the command queue]), f16/bf16 as packed storage (see [Note: packed 16-bit
 * storage]). Create it with `createWebGpuBackend`.
 */
export class WebGpuBackend extends PooledBackend<GPUBuffer> implements Backend {
  readonly kind = 'webgpu' as const;
  readonly capabilities: BackendCapabilities;
  readonly description: string;
  /** The matmul kernel in use on this adapter. */
  readonly matmulKernel: MatmulKernel;
  /** Its tuning, from the adapter's row of [Note: matmul tuning per adapter]. */
  readonly matmulTuning: MatmulTuning;
  /** Keeps and replays a call's queued commands ([Note: a captured step on WebGPU]). */
  readonly workRecorder: WorkRecorder;
  private readonly queue: DeviceQueue;
  /** Reads in flight: see [Note: chunked reads through pooled staging]. */
  private readonly readbacks: Readbacks;
  /** What the staging and dispatch helpers use of this backend. */
  private readonly ctx: LaunchContext;
  /** Rows this wide or wider take the segmented cross entropy: [Note: cross entropy over wide rows]. */
  private readonly wideCrossEntropy: number;

  /** @internal Use `createWebGpuBackend`. */
  constructor(
    /** Held for the device's life: see [Note: strong references to the GPU instance]. */
    readonly gpu: GPU,
    readonly adapter: GPUAdapter,
    readonly device: GPUDevice,
    options: WebGpuBackendOptions,
  ) {
    const maxBytes = Math.min(
      device.limits.maxBufferSize,
      device.limits.maxStorageBufferBindingSize,
    );
    const hasF16 = device.features.has('shader-f16');
    // createWebGpuBackend resolved the option (and WEBSHARD_F16) already.
    const nativeF16 = f16Layout(options.f16 ?? 'auto', hasF16, isCpuAdapter(adapter)) === 'native';
    const queue = new DeviceQueue(device, { nativeF16 });
    let readbacks: Readbacks | undefined;
    const allocator = deviceAllocator(device, maxBytes, (buffer) =>
      readbacks?.destroyWhenFree(buffer),
    );
    super(allocator, 'WebGPU');
    this.queue = queue;
    readbacks = new Readbacks(queue, allocator, (buffer) => queue.destroyLater(buffer));
    this.readbacks = readbacks;
    this.workRecorder = webGpuWorkRecorder(queue, readbacks, () => this.assertLive('replay'));
    this.wideCrossEntropy = isCpuAdapter(adapter) ? Number.POSITIVE_INFINITY : WIDE_COLS;
    this.ctx = {
      queue,
      readbacks,
      allocate: (bytes) => this.allocate(bytes),
      release: (storage) => this.release(storage),
      run: (launch) => this.run(launch),
    };
    const env = typeof process !== 'undefined' ? process.env?.WEBSHARD_MATMUL : undefined;
    const chosen = matmulTuningFor(adapter.info, options.matmulKernel ?? matmulKernelFromEnv(env));
    const tuning = options.matmulTuning ?? chosen.tuning;
    this.matmulTuning = usableTuning(tuning, device.features, adapter.info);
    this.matmulKernel = this.matmulTuning.kernel;
    this.capabilities = {
      shaderF16: hasF16,
      f16Storage: nativeF16 ? 'native' : 'packed',
      maxStorageBytes: maxBytes,
    };
    this.description = `webgpu: ${describeAdapter(adapter)}`;
    if (options.memoryLimit !== undefined) this.allocator.setLimit(options.memoryLimit);
  }

  // ---- transfers --------------------------------------------------------------------------

  write(dst: KernelTensor, data: HostArray, done?: () => void): void {
    this.assertLive('write');
    this.checkDType('write', dst.dtype);
    stageWrite(this.ctx, dst, data, done);
  }

  async read<T extends HostArray>(src: KernelTensor, into?: T): Promise<T> {
    this.assertLive('read');
    this.checkDType('read', src.dtype);
    const bpe = bytesPerElement(src.dtype);
    const size = shapeSize(src.shape);
    const out = into ?? (hostArrayFor(src.dtype, size) as T);
    checkReadTarget(src, out);
    const start = Math.floor((src.offset * bpe) / 4) * 4;
    const end = Math.ceil(((src.offset + size) * bpe) / 4) * 4;
    const bytes = Math.max(end - start, 0);
    const view = new Uint8Array(out.buffer, out.byteOffset, size * bpe);
    const buffer = src.storage.buffer as GPUBuffer;
    const flag = await this.readbacks.read(buffer, start, bytes, view, src.offset * bpe - start);
    this.raiseDeferred(flag);
    return out;
  }

  async sync(): Promise<void> {
    this.assertLive('sync');
    const flag = await this.readbacks.read(this.queue.errorFlag, 0, 0, new Uint8Array(0), 0);
    this.raiseDeferred(flag);
  }

  dispose(): void {
    if (this.lifecycle === 'disposed') return;
    this.lifecycle = 'disposed';
    this.device.destroy();
  }

  private raiseDeferred(flag: Uint32Array): void {
    if ((flag[0] ?? 0) === 0) return;
    this.queue.clearErrorFlag();
    DeviceQueue.checkErrorFlag(flag);
  }

  private checkDType(op: string, dtype: DType): void {
    if (dtype === 'f64') {
      throw new DTypeError(
        op,
        [dtype],
        'the WebGPU backend has no f64 (use f32, or the CPU backend)',
      );
    }
  }

  /** Enqueue a launch, after the checks; `dispatch` handles operands that share a buffer. */
  private run(launch: Launch): void {
    this.assertLive(launch.program.name);
    for (const b of launch.bindings) this.checkDType(launch.program.name, b.dtype);
    dispatch(this.ctx, launch);
  }

  // ---- kernels ----------------------------------------------------------------------------

  fill(out: KernelTensor, value: number): void {
    this.run(fillLaunch(dense(out), value));
  }

  copy(src: KernelTensor, out: KernelTensor): void {
    this.run(copyLaunch(dense(src), dense(out)));
  }

  cast(src: KernelTensor, out: KernelTensor): void {
    this.run(copyLaunch(dense(src), dense(out)));
  }

  copyStrided(src: StridedOperand, dst: StridedOperand, shape: readonly number[]): void {
    this.run(copyStridedLaunch(src, dst, shape));
  }

  unary(op: UnaryOp, x: KernelTensor, out: KernelTensor): void {
    this.run(unaryLaunch(op, dense(x), dense(out)));
  }

  binary(
    op: BinaryOp,
    a: KernelTensor | number,
    b: KernelTensor | number,
    out: KernelTensor,
  ): void {
    this.run(binaryLaunch(op, operand(a), operand(b), denseShaped(out)));
  }

  where(
    cond: KernelTensor,
    a: KernelTensor | number,
    b: KernelTensor | number,
    out: KernelTensor,
  ): void {
    this.run(whereLaunch(denseShaped(cond), operand(a), operand(b), denseShaped(out)));
  }

  reduce(op: ReductionOp, x: KernelTensor, axis: number, out: KernelTensor): void {
    runReduce(this.ctx, op, dense(x), x.shape, axis, dense(out));
  }

  softmax(x: KernelTensor, out: KernelTensor, log: boolean): void {
    const cols = x.shape[x.shape.length - 1] ?? 1;
    this.run(softmaxLaunch(dense(x), dense(out), shapeSize(x.shape) / cols, cols, log));
  }

  layerNorm(
    x: KernelTensor,
    weight: KernelTensor | null,
    bias: KernelTensor | null,
    eps: number,
    out: KernelTensor,
    mean: KernelTensor,
    rstd: KernelTensor,
  ): void {
    const cols = x.shape[x.shape.length - 1] ?? 1;
    const rows = shapeSize(x.shape) / cols;
    this.run(
      layerNormLaunch(
        dense(x),
        weight && dense(weight),
        bias && dense(bias),
        eps,
        dense(out),
        dense(mean),
        dense(rstd),
        rows,
        cols,
      ),
    );
  }

  layerNormBackward(
    dy: KernelTensor,
    x: KernelTensor,
    weight: KernelTensor | null,
    mean: KernelTensor,
    rstd: KernelTensor,
    dx: KernelTensor,
    dWeight: KernelTensor | null,
    dBias: KernelTensor | null,
  ): void {
    const cols = x.shape[x.shape.length - 1] ?? 1;
    const rows = shapeSize(x.shape) / cols;
    for (const l of layerNormBackwardLaunches(
      dense(dy),
      dense(x),
      weight && dense(weight),
      dense(mean),
      dense(rstd),
      dense(dx),
      dWeight && dense(dWeight),
      dBias && dense(dBias),
      rows,
      cols,
    )) {
      this.run(l);
    }
  }

  matmul(
    a: KernelTensor,
    b: KernelTensor,
    out: KernelTensor,
    transposeA: boolean,
    transposeB: boolean,
  ): void {
    runMatmul(this.ctx, this.matmulTuning, a, b, out, transposeA, transposeB);
  }

  /** Declines (false) what one dispatch cannot do: [Note: the WebGPU strided matmul]. */
  matmulStrided(
    a: StridedOperand,
    b: StridedOperand,
    out: StridedOperand,
    batch: readonly number[],
    m: number,
    k: number,
    n: number,
    accumulate: boolean,
  ): boolean {
    const launch = matmulStridedLaunch(this.matmulTuning, a, b, out, batch, m, k, n, accumulate);
    if (launch === null) return false;
    this.run(launch);
    return true;
  }

  gather(table: KernelTensor, indices: KernelTensor, out: KernelTensor): void {
    const [vocab = 0, dim = 1] = table.shape;
    this.run(gatherLaunch(dense(table), dense(indices), dense(out), vocab, dim));
  }

  scatterAdd(src: KernelTensor, indices: KernelTensor, out: KernelTensor): void {
    const [rows = 0, dim = 1] = src.shape;
    const vocab = out.shape[0] ?? 0;
    this.run(scatterAddLaunch(dense(src), dense(indices), dense(out), rows, vocab, dim));
  }

  crossEntropy(
    logits: KernelTensor,
    targets: KernelTensor,
    losses: KernelTensor,
    ignoreIndex: number,
  ): void {
    const [rows = 0, cols = 1] = logits.shape;
    const [x, t, l] = [dense(logits), dense(targets), dense(losses)];
    if (cols >= this.wideCrossEntropy)
      runWideCrossEntropy(this.ctx, x, t, l, ignoreIndex, rows, cols, null);
    else this.run(crossEntropyLaunch(x, t, l, ignoreIndex, rows, cols, null));
  }

  crossEntropyBackward(
    logits: KernelTensor,
    targets: KernelTensor,
    dLosses: KernelTensor,
    dLogits: KernelTensor,
    ignoreIndex: number,
  ): void {
    const [rows = 0, cols = 1] = logits.shape;
    const [x, t, dl] = [dense(logits), dense(targets), dense(dLosses)];
    const backward = { dLosses: dl, dLogits: dense(dLogits) };
    if (cols >= this.wideCrossEntropy) {
      runWideCrossEntropy(this.ctx, x, t, dl, ignoreIndex, rows, cols, backward);
    } else this.run(crossEntropyLaunch(x, t, dl, ignoreIndex, rows, cols, backward));
  }

  adam(
    param: KernelTensor,
    grad: KernelTensor,
    expAvg: KernelTensor,
    expAvgSq: KernelTensor,
    h: AdamHyper,
  ): void {
    requireF32State('adam', [param, expAvg, expAvgSq]);
    this.run(adamLaunch(dense(param), dense(grad), dense(expAvg), dense(expAvgSq), adamScalars(h)));
  }

  sgd(
    param: KernelTensor,
    grad: KernelTensor,
    momentumBuffer: KernelTensor | null,
    h: SgdHyper,
  ): void {
    requireF32State('sgd', momentumBuffer ? [param, momentumBuffer] : [param]);
    const buffer = h.momentum !== 0 && momentumBuffer ? dense(momentumBuffer) : null;
    this.run(sgdLaunch(dense(param), dense(grad), buffer, h));
  }

  checkFinite(x: KernelTensor, flag: KernelTensor): void {
    this.run(checkFiniteLaunch(dense(x), dense(flag)));
  }

  axpy(alpha: number, x: KernelTensor, y: KernelTensor): void {
    this.run(axpyLaunch(alpha, dense(x), dense(y)));
  }

  randomUniform(out: KernelTensor, seed: number, offset: number, low: number, high: number): void {
    this.run(randomUniformLaunch(dense(out), seed, offset, low, high));
  }

  /** Drawn on the host and uploaded: see [Note: normals on the host]. */
  randomNormal(out: KernelTensor, seed: number, offset: number, mean: number, std: number): void {
    this.assertLive('randomNormal');
    this.checkDType('randomNormal', out.dtype);
    const values = new Float32Array(shapeSize(out.shape));
    philoxNormal(values, seed, offset, mean, std);
    this.write(out, hostArrayFromF32(values, out.dtype));
  }
}

/**
 * Creates a WebGPU backend: finds an adapter (see [Note: finding SwiftShader]), requests a device
 * with the adapter's largest buffer limits, and `shader-f16` and `subgroups` where offered. About 0.5 s on
 * SwiftShader, plus 0.04-3 s per distinct kernel on first use (pipelines are cached per backend).
 * Throws `NoAdapterError` when no adapter exists.
 */
export async function createWebGpuBackend(
  options: WebGpuBackendOptions = {},
): Promise<WebGpuBackend> {
  const { gpu, adapter, device, f16 } = await openWebGpuDevice(options);
  return new WebGpuBackend(gpu, adapter, device, { ...options, f16 });
}
