import type { HostArray } from '../../dtype.js';
import { CachingAllocator, type MemoryStats } from '../../memory/caching-allocator.js';
import { philoxNormal, philoxUniform } from '../../random/philox.js';
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
import { checkReadTarget, PooledBackend } from '../pooled-backend.js';
import { outputValues, rawView } from './cpu-storage.js';
import { ExternalStorage } from './external-storage.js';
import {
  axpyKernel,
  binaryKernel,
  castKernel,
  copyKernel,
  fillKernel,
  unaryKernel,
  whereKernel,
} from './elementwise-kernels.js';
import {
  checkFiniteKernel,
  crossEntropyBackwardKernel,
  crossEntropyKernel,
  gatherKernel,
  scatterAddKernel,
} from './index-kernels.js';
import { crossEntropyBackwardWasm, crossEntropyWasm } from './cross-entropy-wasm.js';
import { type CpuBackendOptions, chooseCpuKernels } from './cpu-backend-options.js';
import type { WasmKernels } from './kernels-wasm.js';
import { copyStridedKernel, reduceKernel } from './layout-kernels.js';
import { geluOnThreads } from './gelu-threads.js';
import { attentionBackward, attentionForward } from './attention-kernel.js';
import { linearKernel, matmulKernel } from './matmul.js';
import { matmulStridedKernel } from './matmul-strided.js';
import type { WasmMatmul } from './matmul-wasm.js';
import { adamKernel, sgdKernel } from './optimizer-kernels.js';
import {
  layerNormBackwardKernel,
  layerNormKernel,
  softmaxBackwardKernel,
  softmaxKernel,
} from './row-kernels.js';

/** What the CPU backend's allocator pools whatever the peak: see [Note: a bounded pool]. */
const CPU_POOL_BYTES = 256 * 2 ** 20;
/** Past that, the most it holds in all, in peaks of allocated bytes: [Note: a bounded pool]. */
const CPU_RESERVE_OVER_PEAK = 1.25;

/**
 * The CPU backend: every kernel of the contract in plain TypeScript over ArrayBuffers, except the
 * f32 matmul and the other hot f32 kernels, which run as WebAssembly SIMD where the engine has it
 * ([Note: the WASM SIMD matmul], [Note: the WASM SIMD kernels]).
 * Floats compute in doubles and round once on store (see [Note: CPU stores round once per dtype]).
 * f64 is supported here only, for gradient checks.
 */
export class CpuBackend extends PooledBackend<ArrayBuffer> implements Backend {
  readonly kind = 'cpu' as const;
  readonly capabilities: BackendCapabilities = {
    shaderF16: false,
    f16Storage: 'packed',
    maxStorageBytes: 2 ** 31,
  };
  readonly description: string;
  /** Which f32 matmul runs: see [Note: the WASM SIMD matmul]. */
  readonly matmulKernel: 'wasm-simd' | 'typescript';
  private readonly wasmMatmul: WasmMatmul | null;
  /** Which of the other hot f32 kernels run: see [Note: the WASM SIMD kernels]. */
  readonly kernels: 'wasm-simd' | 'typescript';
  private readonly wasmKernels: WasmKernels | null;

  constructor(options: CpuBackendOptions = {}) {
    super(
      new CachingAllocator<ArrayBuffer>(
        { create: (byteSize) => new ArrayBuffer(byteSize), destroy: () => {} },
        'cpu',
        CPU_POOL_BYTES,
        CPU_RESERVE_OVER_PEAK,
      ),
      'cpu',
    );
    this.allocator.setLimit(options.memoryLimit);
    const chosen = chooseCpuKernels(options);
    this.wasmMatmul = chosen.wasmMatmul;
    this.matmulKernel = this.wasmMatmul === null ? 'typescript' : 'wasm-simd';
    this.wasmKernels = chosen.wasmKernels;
    this.kernels = this.wasmKernels === null ? 'typescript' : 'wasm-simd';
    this.description = chosen.description;
  }

  /**
   * Starts the WASM matmul's worker threads now rather than at the first large matmul; resolves
   * to the threads it uses (1 with the TypeScript kernel or without workers).
   */
  startMatmulThreads(): Promise<number> {
    return this.wasmMatmul?.startThreads() ?? Promise.resolve(1);
  }

  /**
   * Threads a large f32 matmul uses now: 1 with the TypeScript kernel, without workers, or until
   * they run ([Note: matmul threads]).
   */
  get matmulThreadsInUse(): number {
    return this.wasmMatmul?.threadsInUse ?? 1;
  }

  // ---- external memory --------------------------------------------------------------------
  private readonly external = new ExternalStorage((bytes) => this.allocator.chargeOutside(bytes));

  /**
   * Storage over `bytes` bytes of memory the caller owns, from the start of `buffer` (an
   * ArrayBuffer, SharedArrayBuffer or WebAssembly memory's buffer): kernels read and write it in
   * place. Never pooled; releasing it only ends the accounting. See `tensorFromHostArray`.
   */
  wrapExternal(
    buffer: ArrayBufferLike,
    byteSize: number,
    ownedBytes: number,
    onRelease?: () => void,
  ): RawStorage {
    this.assertLive('wrapExternal');
    return this.external.wrap(buffer, byteSize, ownedBytes, onRelease);
  }

  override release(storage: RawStorage): void {
    if (!this.external.release(storage)) super.release(storage);
  }

  override memoryStats(): MemoryStats {
    return {
      ...super.memoryStats(),
      externalBytes: this.external.bytes,
      peakExternalBytes: this.external.peakBytes,
      scratchBytes: (this.wasmKernels?.scratchBytes ?? 0) + (this.wasmMatmul?.scratchBytes ?? 0),
    };
  }

  override resetPeakMemoryStats(): void {
    super.resetPeakMemoryStats();
    this.external.resetPeak();
  }

  // ---- transfers --------------------------------------------------------------------------
  write(dst: KernelTensor, data: HostArray, done?: () => void): void {
    this.assertLive('write');
    rawView(dst).set(data as never);
    done?.();
  }

  async read<T extends HostArray>(src: KernelTensor, into?: T): Promise<T> {
    this.assertLive('read');
    if (into === undefined) return rawView(src).slice() as T;
    checkReadTarget(src, into);
    into.set(rawView(src) as never);
    return into;
  }

  sync(): Promise<void> {
    this.assertLive('sync');
    return Promise.resolve();
  }

  dispose(): void {
    this.allocator.emptyCache();
    this.wasmMatmul?.dispose();
    this.lifecycle = 'disposed';
  }

  // ---- kernels: each a call into its family's file (elementwise, layout, row, index, matmul,
  // optimizer; kernel-common has the shared helpers), as the WebGPU backend's kernels.ts ----
  fill(out: KernelTensor, value: number): void {
    this.assertLive('fill');
    fillKernel(out, value);
  }

  copy(src: KernelTensor, out: KernelTensor): void {
    this.assertLive('copy');
    copyKernel(src, out);
  }

  cast(src: KernelTensor, out: KernelTensor): void {
    this.assertLive('cast');
    castKernel(src, out);
  }

  copyStrided(src: StridedOperand, dst: StridedOperand, shape: readonly number[]): void {
    this.assertLive('copyStrided');
    copyStridedKernel(src, dst, shape);
  }

  unary(op: UnaryOp, x: KernelTensor, out: KernelTensor): void {
    this.assertLive('unary');
    if (op === 'gelu' && this.geluOnThreads(x, null, out)) return;
    if (this.wasmKernels?.unary(op, x, out)) return;
    unaryKernel(op, x, out);
  }

  binary(
    op: BinaryOp,
    a: KernelTensor | number,
    b: KernelTensor | number,
    out: KernelTensor,
  ): void {
    this.assertLive('binary');
    if (op === 'geluGrad' && typeof a !== 'number' && typeof b !== 'number') {
      if (this.geluOnThreads(a, b, out)) return;
    }
    if (this.wasmKernels?.binary(op, a, b, out)) return;
    binaryKernel(op, a, b, out);
  }

  /**
   * The WASM matmul where the WASM kernels run too: the kernels' maps it carries (GELU, attention's
   * softmax) then give the bits those kernels give.
   */
  private get matmulWithKernels(): WasmMatmul | null {
    return this.wasmKernels === null ? null : this.wasmMatmul;
  }

  /** A large GELU map on the matmul's threads: [Note: GELU on the matmul's threads]. */
  private geluOnThreads(x: KernelTensor, dy: KernelTensor | null, out: KernelTensor): boolean {
    const matmul = this.matmulWithKernels;
    return matmul !== null && geluOnThreads(matmul, x, dy, out);
  }

  where(
    cond: KernelTensor,
    a: KernelTensor | number,
    b: KernelTensor | number,
    out: KernelTensor,
  ): void {
    this.assertLive('where');
    if (this.wasmKernels?.where(cond, a, b, out)) return;
    whereKernel(cond, a, b, out);
  }

  reduce(op: ReductionOp, x: KernelTensor, axis: number, out: KernelTensor): void {
    this.assertLive('reduce');
    if (this.wasmKernels?.reduce(op, x, axis, out)) return;
    reduceKernel(op, x, axis, out);
  }

  softmax(x: KernelTensor, out: KernelTensor, log: boolean): void {
    this.assertLive('softmax');
    if (this.wasmKernels?.softmax(x, out, log)) return;
    softmaxKernel(x, out, log);
  }

  softmaxBackward(y: KernelTensor, dy: KernelTensor, dx: KernelTensor): boolean {
    this.assertLive('softmaxBackward');
    if (this.wasmKernels?.softmaxBackward(y, dy, dx)) return true;
    return softmaxBackwardKernel(y, dy, dx);
  }

  /**
   * [Note: attention's softmax in one call]: the WASM kernels' chain in their memory, else this
   * backend's own `binary`, `where` and `softmax` run in place on out, which round to out's dtype
   * as the ops' outputs do.
   */
  scaledMaskedSoftmax(
    x: KernelTensor,
    mask: KernelTensor,
    scale: number,
    out: KernelTensor,
  ): boolean {
    this.assertLive('scaledMaskedSoftmax');
    if (this.wasmKernels?.scaledMaskedSoftmax(x, mask, scale, out)) return true;
    this.binary('mul', x, scale, out);
    this.where(mask, Number.NEGATIVE_INFINITY, out, out);
    this.softmax(out, out, false);
    return true;
  }

  scaledMaskedSoftmaxBackward(
    y: KernelTensor,
    dy: KernelTensor,
    mask: KernelTensor,
    scale: number,
    dx: KernelTensor,
  ): boolean {
    this.assertLive('scaledMaskedSoftmaxBackward');
    if (this.wasmKernels?.scaledMaskedSoftmaxBackward(y, dy, mask, scale, dx)) return true;
    if (!this.softmaxBackward(y, dy, dx)) return false;
    this.where(mask, 0, dx, dx);
    this.binary('mul', dx, scale, dx);
    return true;
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
    this.assertLive('layerNorm');
    if (this.wasmKernels?.layerNorm(x, weight, bias, eps, out, mean, rstd)) return;
    layerNormKernel(x, weight, bias, eps, out, mean, rstd);
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
    this.assertLive('layerNormBackward');
    if (this.wasmKernels?.layerNormBackward(dy, x, weight, mean, rstd, dx, dWeight, dBias)) return;
    layerNormBackwardKernel(dy, x, weight, mean, rstd, dx, dWeight, dBias);
  }

  matmul(
    a: KernelTensor,
    b: KernelTensor,
    out: KernelTensor,
    transposeA: boolean,
    transposeB: boolean,
  ): void {
    this.assertLive('matmul');
    matmulKernel(a, b, out, transposeA, transposeB, this.wasmMatmul);
  }

  matmulStrided(
    a: StridedOperand,
    b: StridedOperand,
    out: StridedOperand,
    batch: readonly number[],
    m: number,
    k: number,
    n: number,
    accumulate: boolean,
  ): void {
    this.assertLive('matmulStrided');
    matmulStridedKernel(a, b, out, batch, m, k, n, accumulate, this.wasmMatmul);
  }

  linear(x: KernelTensor, weight: KernelTensor, bias: KernelTensor, out: KernelTensor): boolean {
    this.assertLive('linear');
    return linearKernel(x, weight, bias, out, this.wasmMatmul);
  }

  attention(
    qkv: KernelTensor,
    mask: KernelTensor,
    nHead: number,
    scale: number,
    y: KernelTensor,
    att: KernelTensor,
  ): boolean {
    this.assertLive('attention');
    // The softmax's bits are the WASM kernels' ([Note: attention's heads in one call]).
    const matmul = this.matmulWithKernels;
    return matmul !== null && attentionForward(matmul, qkv, mask, nHead, scale, y, att);
  }

  attentionBackward(
    qkv: KernelTensor,
    att: KernelTensor,
    dy: KernelTensor,
    mask: KernelTensor,
    nHead: number,
    scale: number,
    dqkv: KernelTensor,
  ): boolean {
    this.assertLive('attentionBackward');
    const matmul = this.matmulWithKernels;
    return matmul !== null && attentionBackward(matmul, qkv, att, dy, mask, nHead, scale, dqkv);
  }

  gather(table: KernelTensor, indices: KernelTensor, out: KernelTensor): void {
    this.assertLive('gather');
    gatherKernel(table, indices, out);
  }

  scatterAdd(src: KernelTensor, indices: KernelTensor, out: KernelTensor): void {
    this.assertLive('scatterAdd');
    scatterAddKernel(src, indices, out);
  }

  crossEntropy(
    logits: KernelTensor,
    targets: KernelTensor,
    losses: KernelTensor,
    ignoreIndex: number,
  ): void {
    this.assertLive('crossEntropy');
    const kernels = this.wasmKernels;
    if (kernels && crossEntropyWasm(kernels, this, logits, targets, losses, ignoreIndex)) return;
    crossEntropyKernel(logits, targets, losses, ignoreIndex);
  }

  crossEntropyBackward(
    logits: KernelTensor,
    targets: KernelTensor,
    dLosses: KernelTensor,
    dLogits: KernelTensor,
    ignoreIndex: number,
  ): void {
    this.assertLive('crossEntropyBackward');
    const kernels = this.wasmKernels;
    if (
      kernels &&
      crossEntropyBackwardWasm(kernels, logits, targets, dLosses, dLogits, ignoreIndex)
    )
      return;
    crossEntropyBackwardKernel(logits, targets, dLosses, dLogits, ignoreIndex);
  }

  adam(
    param: KernelTensor,
    grad: KernelTensor,
    expAvg: KernelTensor,
    expAvgSq: KernelTensor,
    hyper: AdamHyper,
  ): void {
    this.assertLive('adam');
    if (this.wasmKernels?.adam(param, grad, expAvg, expAvgSq, hyper)) return;
    adamKernel(param, grad, expAvg, expAvgSq, hyper);
  }

  sgd(
    param: KernelTensor,
    grad: KernelTensor,
    momentumBuffer: KernelTensor | null,
    hyper: SgdHyper,
  ): void {
    this.assertLive('sgd');
    sgdKernel(param, grad, momentumBuffer, hyper);
  }

  checkFinite(x: KernelTensor, flag: KernelTensor): void {
    this.assertLive('checkFinite');
    checkFiniteKernel(x, flag);
  }

  axpy(alpha: number, x: KernelTensor, y: KernelTensor): void {
    this.assertLive('axpy');
    axpyKernel(alpha, x, y);
  }

  randomUniform(out: KernelTensor, seed: number, offset: number, low: number, high: number): void {
    this.assertLive('randomUniform');
    const o = outputValues(out);
    philoxUniform(o.values, seed, offset, low, high, out.dtype === 'f64' ? 'f64' : 'f32');
    o.commit();
  }

  randomNormal(out: KernelTensor, seed: number, offset: number, mean: number, std: number): void {
    this.assertLive('randomNormal');
    const o = outputValues(out);
    philoxNormal(o.values, seed, offset, mean, std);
    o.commit();
  }
}
