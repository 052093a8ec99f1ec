/// <reference types="@webgpu/types" />
import { bytesPerElement, type DType, type HostArray, hostArrayFor } from '../../dtype.js';
import { f32ToBf16Bits, f32ToF16Bits } from '../../dtype-convert.js';
import { envChoice } from '../../env.js';
import { BackendError, DTypeError, OutOfMemoryError } from '../../errors.js';
import { CachingAllocator } from '../../memory/caching-allocator.js';
import { philoxNormal } from '../../random/philox.js';
import { checkReadTarget, PooledBackend } from '../pooled-backend.js';
import type {
  AdamHyper,
  Backend,
  BackendCapabilities,
  BinaryOp,
  KernelTensor,
  RawStorage,
  ReductionOp,
  SgdHyper,
  StridedOperand,
  UnaryOp,
} from '../backend.js';
import { DeviceQueue } from './device-queue.js';
import {
  type AdapterOptions,
  acquireAdapter,
  BufferUsage,
  describeAdapter,
  isCpuAdapter,
} from './gpu-runtime.js';
import {
  adamLaunch,
  axpyLaunch,
  type BroadcastOperand,
  binaryLaunch,
  checkFiniteLaunch,
  copyLaunch,
  copyStridedLaunch,
  crossEntropyLaunch,
  type Dense,
  fillLaunch,
  gatherLaunch,
  layerNormBackwardLaunches,
  layerNormLaunch,
  reduceLaunch,
  scatterAddLaunch,
  sgdLaunch,
  shapeSize,
  softmaxLaunch,
  unaryLaunch,
  whereLaunch,
} from './kernels.js';
import { type MatmulKernel, type MatmulTuning, matmulLaunch } from './matmul.js';
import { matmulKernelFromEnv, matmulTuningFor } from './matmul-tuning.js';
import type { Launch } from './program.js';
import { randomUniformLaunch } from './random-kernels.js';
import { READ_STAGING, Readbacks } from './readback.js';

/** Options of `createWebGpuBackend`. */
export interface WebGpuBackendOptions extends AdapterOptions {
  /** Emulated device memory limit in bytes (see `Backend.setMemoryLimit`). */
  memoryLimit?: number;
  /** Force a matmul kernel instead of choosing per adapter. */
  matmulKernel?: MatmulKernel;
  /** Force a full matmul tuning (benchmarks of the tuning table). */
  matmulTuning?: MatmulTuning;
  /**
   * How f16 tensors are stored (see [Note: native f16 storage]): `'native'` (`array<f16>`; throws
   * a `BackendError` where the adapter lacks `shader-f16`), `'packed'` (two per u32 word, on every
   * adapter), or `'auto'`: native on GPUs that have the feature, packed on CPU adapters (see
   * `f16Layout`). Default: the environment variable `WEBSHARD_F16`, else `'auto'`. Results are
   * bit-identical either way.
   */
  f16?: F16Storage;
}

/** The `f16` option of `createWebGpuBackend`. */
export type F16Storage = 'auto' | 'native' | 'packed';

/**
 * The f16 layout a backend uses: `'native'` needs `shader-f16` (callers check first); `'auto'` is
 * native on GPUs with the feature and packed on CPU adapters, where packed measured faster
 * (lavapipe: an f16 add 1.9x, a transpose 1.35-1.7x; the bench's "native storage" rows): they run a
 * workgroup as SIMD lanes of a CPU core, and packed storage does two elements per invocation.
 */
export function f16Layout(
  option: F16Storage,
  hasShaderF16: boolean,
  cpuAdapter: boolean,
): 'native' | 'packed' {
  if (option === 'packed' || !hasShaderF16) return 'packed';
  if (option === 'native') return 'native';
  return cpuAdapter ? 'packed' : 'native';
}

function chooseF16(option: F16Storage | undefined): F16Storage {
  const choices: F16Storage[] = ['auto', 'native', 'packed'];
  return envChoice('createWebGpuBackend', 'WEBSHARD_F16', option, choices, 'auto');
}

const USAGE = () => BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;

function dense(t: KernelTensor): Dense {
  return { storage: t.storage, offset: t.offset, dtype: t.dtype, size: shapeSize(t.shape) };
}

function denseShaped(t: KernelTensor): Dense & { shape: readonly number[] } {
  return { ...dense(t), shape: t.shape };
}

function operand(v: KernelTensor | number): BroadcastOperand {
  return typeof v === 'number' ? v : denseShaped(v);
}

/** The fused optimizer kernels read and write their state as f32 words. */
function requireF32State(op: string, state: readonly KernelTensor[]): void {
  const other = state.find((t) => t.dtype !== 'f32');
  if (other) {
    throw new DTypeError(
      op,
      [other.dtype],
      'the WebGPU optimizer kernels update f32 parameters and state (keep an f32 master copy)',
    );
  }
}

/** f32 values in `dtype`'s storage format, rounded as the CPU backend's stores round them. */
function hostArrayFromF32(values: Float32Array, dtype: DType): HostArray {
  if (dtype === 'f32') return values;
  if (dtype !== 'f16' && dtype !== 'bf16') {
    throw new DTypeError('randomNormal', [dtype], 'normal values need a float dtype');
  }
  const encode = dtype === 'f16' ? f32ToF16Bits : f32ToBf16Bits;
  return Uint16Array.from(values, encode);
}

function plainCopy(data: HostArray): ArrayBuffer {
  // queue.writeBuffer on a SharedArrayBuffer view segfaults (ANCHORS.md): always hand it a plain
  // ArrayBuffer of our own, which also lets the write wait in the queue safely.
  const bytes = new Uint8Array(data.byteLength + ((4 - (data.byteLength % 4)) % 4));
  bytes.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  return bytes.buffer;
}

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
  private readonly queue: DeviceQueue;
  /** Reads in flight: see [Note: chunked reads through pooled staging]. */
  private readonly readbacks: Readbacks;

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
    const allocator: CachingAllocator<GPUBuffer> = new CachingAllocator<GPUBuffer>(
      {
        create: (size, usage) => {
          if (size > maxBytes) {
            throw new OutOfMemoryError(size, allocator.stats().allocated, maxBytes, 'webgpu');
          }
          return device.createBuffer({
            size,
            usage: usage === READ_STAGING ? BufferUsage.MAP_READ | BufferUsage.COPY_DST : USAGE(),
          });
        },
        destroy: (buffer) => readbacks?.destroyWhenFree(buffer),
      },
      'webgpu',
    );
    super(allocator, 'WebGPU');
    this.queue = queue;
    readbacks = new Readbacks(queue, allocator, (buffer) => queue.destroyLater(buffer));
    this.readbacks = readbacks;
    const env = typeof process !== 'undefined' ? process.env?.WEBSHARD_MATMUL : undefined;
    const chosen = matmulTuningFor(adapter.info, options.matmulKernel ?? matmulKernelFromEnv(env));
    this.matmulTuning = options.matmulTuning ?? chosen.tuning;
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
    const bpe = bytesPerElement(dst.dtype);
    const size = shapeSize(dst.shape);
    if (size === 0) {
      done?.();
      return;
    }
    const buffer = dst.storage.buffer as GPUBuffer;
    const byteOffset = dst.offset * bpe;
    if (byteOffset % 4 === 0 && (size * bpe) % 4 === 0) {
      this.readbacks.beforeWrite(buffer);
      // Straight from the caller's memory when nothing is queued and it is not shared; when the
      // queue is busy, the caller's memory waits in the queue if the caller lends it (`done`),
      // else a copy does (see plainCopy).
      const view =
        data.buffer instanceof ArrayBuffer
          ? new Uint8Array(data.buffer, data.byteOffset, size * bpe)
          : undefined;
      if (this.queue.idle && view !== undefined) {
        this.queue.writeNow(buffer, byteOffset, view);
        done?.();
      } else if (done !== undefined && view !== undefined) {
        this.queue.write(buffer, byteOffset, view, done);
      } else {
        this.queue.write(buffer, byteOffset, plainCopy(data));
        done?.();
      }
      return;
    }
    // A packed 16-bit range that starts or ends inside a word: stage it, then copy with a kernel
    // that keeps the neighbouring halves.
    const tmp = this.allocate(size * bpe);
    this.readbacks.beforeWrite(tmp.buffer as GPUBuffer);
    this.queue.write(tmp.buffer as GPUBuffer, 0, plainCopy(data));
    done?.();
    this.run(copyLaunch({ storage: tmp, offset: 0, dtype: dst.dtype, size }, dense(dst)));
    this.release(tmp);
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

  /**
   * Enqueue a launch. WebGPU forbids a buffer bound as writable storage from being bound again in
   * the same dispatch, as read-only storage or as another writable binding (Dawn rejects aliasing
   * writable bindings whose ranges overlap, and a binding here is the whole buffer). Views of one
   * flat buffer (FSDP's flat parameters, an optimizer's state) would hit both, so: a read-only
   * operand in a buffer the launch also writes is copied to a temporary first; a second writable
   * operand in one buffer runs on a temporary copy of its range, copied back into its view after
   * the kernel by an element-wise copy (which keeps neighbouring 16-bit halves).
   */
  private run(launch: Launch): void {
    this.assertLive(launch.program.name);
    for (const b of launch.bindings) this.checkDType(launch.program.name, b.dtype);
    if (launch.shape.some((d) => d === 0)) return;
    const writable = new Set(
      launch.bindings.filter((b) => b.writable).map((b) => b.storage.buffer),
    );
    for (const buffer of writable) this.readbacks.beforeWrite(buffer as GPUBuffer);
    const boundWritable = new Set<unknown>();
    const temps: RawStorage[] = [];
    const copyBacks: Launch[] = [];
    const bindings = launch.bindings.map((b) => {
      if (b.writable && !boundWritable.has(b.storage.buffer)) {
        boundWritable.add(b.storage.buffer);
        return b;
      }
      if (!b.writable && !writable.has(b.storage.buffer)) return b;
      // Same byte positions in the temporary, so the operand's offset (in the params) still holds.
      const bpe = bytesPerElement(b.dtype);
      const start = Math.floor((b.offset * bpe) / 4) * 4;
      const end = Math.ceil(((b.offset + b.extent) * bpe) / 4) * 4;
      const tmp = this.allocate(end);
      temps.push(tmp);
      this.readbacks.beforeWrite(tmp.buffer as GPUBuffer);
      this.queue.copy(
        b.storage.buffer as GPUBuffer,
        start,
        tmp.buffer as GPUBuffer,
        start,
        end - start,
      );
      if (b.writable) {
        const view = { offset: b.offset, dtype: b.dtype, size: b.extent };
        copyBacks.push(copyLaunch({ ...view, storage: tmp }, { ...view, storage: b.storage }));
      }
      return { ...b, storage: tmp };
    });
    const buffers = bindings.map((b) => b.storage.buffer as GPUBuffer);
    this.queue.launch(launch, buffers);
    for (const c of copyBacks) this.run(c);
    for (const t of temps) this.release(t);
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
    const outer = shapeSize(x.shape.slice(0, axis));
    const inner = shapeSize(x.shape.slice(axis + 1));
    this.run(reduceLaunch(op, dense(x), outer, x.shape[axis] ?? 1, inner, dense(out)));
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
    const [aBatch = 1, a1 = 1, a2 = 1] = a.shape;
    const [bBatch = 1, b1 = 1, b2 = 1] = b.shape;
    const m = transposeA ? a2 : a1;
    const k = transposeA ? a1 : a2;
    const n = transposeB ? b1 : b2;
    const batch = out.shape[0] ?? 1;
    const shape = { batch, m, n, k, aBatch, bBatch };
    const o = dense(out);
    if (o.dtype === 'f32') {
      this.run(
        matmulLaunch(this.matmulTuning, dense(a), dense(b), o, transposeA, transposeB, shape),
      );
      return;
    }
    // 16-bit outputs: accumulate into f32, then round once (an element-wise cast owns whole words).
    const tmp = this.allocate(o.size * 4);
    const f32: Dense = { storage: tmp, offset: 0, dtype: 'f32', size: o.size };
    this.run(
      matmulLaunch(this.matmulTuning, dense(a), dense(b), f32, transposeA, transposeB, shape),
    );
    this.run(copyLaunch(f32, o));
    this.release(tmp);
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
    this.run(
      crossEntropyLaunch(
        dense(logits),
        dense(targets),
        dense(losses),
        ignoreIndex,
        rows,
        cols,
        null,
      ),
    );
  }

  crossEntropyBackward(
    logits: KernelTensor,
    targets: KernelTensor,
    dLosses: KernelTensor,
    dLogits: KernelTensor,
    ignoreIndex: number,
  ): void {
    const [rows = 0, cols = 1] = logits.shape;
    this.run(
      crossEntropyLaunch(dense(logits), dense(targets), dense(dLosses), ignoreIndex, rows, cols, {
        dLosses: dense(dLosses),
        dLogits: dense(dLogits),
      }),
    );
  }

  adam(
    param: KernelTensor,
    grad: KernelTensor,
    expAvg: KernelTensor,
    expAvgSq: KernelTensor,
    h: AdamHyper,
  ): void {
    requireF32State('adam', [param, expAvg, expAvgSq]);
    this.run(
      adamLaunch(dense(param), dense(grad), dense(expAvg), dense(expAvgSq), {
        lr: h.lr,
        beta1: h.beta1,
        beta2: h.beta2,
        eps: h.eps,
        weightDecay: h.weightDecay,
        decoupled: h.decoupled,
        gradScale: h.gradScale,
        biasCorrection1: 1 - h.beta1 ** h.step,
        biasCorrection2Sqrt: Math.sqrt(1 - h.beta2 ** h.step),
      }),
    );
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
 * with the adapter's largest buffer limits and `shader-f16` where offered. About 0.5 s on
 * SwiftShader, plus 0.04-3 s per distinct kernel on first use (pipelines are cached per backend).
 * Throws `NoAdapterError` when no adapter exists.
 */
export async function createWebGpuBackend(
  options: WebGpuBackendOptions = {},
): Promise<WebGpuBackend> {
  const f16 = chooseF16(options.f16);
  const { gpu, adapter } = await acquireAdapter(options);
  if (f16 === 'native' && !adapter.features.has('shader-f16')) {
    throw new BackendError(
      'createWebGpuBackend',
      `f16: 'native' needs the shader-f16 feature, which this adapter lacks (${describeAdapter(adapter)}); use 'auto' or 'packed'`,
    );
  }
  const requiredFeatures: GPUFeatureName[] = adapter.features.has('shader-f16')
    ? ['shader-f16']
    : [];
  const device = await adapter.requestDevice({
    requiredFeatures,
    requiredLimits: {
      maxBufferSize: adapter.limits.maxBufferSize,
      maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
      maxStorageBuffersPerShaderStage: adapter.limits.maxStorageBuffersPerShaderStage,
      maxComputeWorkgroupStorageSize: adapter.limits.maxComputeWorkgroupStorageSize,
    },
  });
  return new WebGpuBackend(gpu, adapter, device, { ...options, f16 });
}
