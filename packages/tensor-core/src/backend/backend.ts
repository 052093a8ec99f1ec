import type { DType, HostArray } from '../dtype.js';
import type { MemoryStats } from '../memory/caching-allocator.js';

/**
 * [Note: the kernel contract]
 *
 * A backend is a set of kernels over flat storage, nothing more. The ops layer (`src/ops/`)
 * validates operands, infers output shapes, allocates outputs and records autograd nodes; a kernel
 * receives operands that are already checked and writes into a preallocated output. So every kernel
 * here may assume: shapes agree as documented, dtypes are ones it was documented to accept, offsets
 * and sizes are inside the storage, and outputs do not alias inputs unless documented.
 *
 * Every tensor is contiguous (row-major) in its storage starting at an element `offset`: views into
 * one flat buffer (FSDP's flat parameters) are just tensors with an offset. Non-contiguous access
 * (permute, slice, expand, concat) goes through `copyStrided`, the one strided kernel.
 *
 * Floating point kernels compute in f32 whatever the storage dtype, and round to the output dtype
 * with round-to-nearest-even (f16, bf16). Kernels on the WebGPU backend are enqueued, not run: a
 * kernel call returns at once and the work happens in order on the device; `read` and `sync` wait.
 */

/** Backend-owned memory. `buffer` is an ArrayBuffer on the CPU backend and a GPUBuffer on WebGPU. */
export interface RawStorage {
  readonly buffer: unknown;
  /** Bytes usable by tensors (the allocator may have reserved more). */
  readonly byteSize: number;
}

/** A contiguous operand: storage, element offset, dtype and shape. */
export interface KernelTensor {
  readonly storage: RawStorage;
  readonly offset: number;
  readonly dtype: DType;
  readonly shape: readonly number[];
}

/** A strided operand, for `copyStrided`: element (i0, i1, ...) is at `offset + sum(ik * strides[k])`. */
export interface StridedOperand {
  readonly storage: RawStorage;
  readonly offset: number;
  readonly dtype: DType;
  readonly strides: readonly number[];
}

export type UnaryOp =
  | 'neg'
  | 'abs'
  | 'exp'
  | 'log'
  | 'sqrt'
  | 'rsqrt'
  | 'tanh'
  | 'sigmoid'
  | 'relu'
  /** Exact GELU, 0.5 x (1 + erf(x / sqrt 2)): PyTorch's default. */
  | 'gelu'
  /** GELU's tanh approximation (PyTorch `approximate='tanh'`). */
  | 'geluTanh'
  | 'square'
  | 'reciprocal';

export type BinaryOp =
  | 'add'
  | 'sub'
  | 'mul'
  | 'div'
  | 'pow'
  | 'maximum'
  | 'minimum'
  /** Comparisons write 1 or 0 in the output dtype. */
  | 'eq'
  | 'ne'
  | 'lt'
  | 'le'
  | 'gt'
  | 'ge'
  /** Backward helpers, `op(x, dy)`: dy * relu'(x), dy * gelu'(x), dy * geluTanh'(x). */
  | 'reluGrad'
  | 'geluGrad'
  | 'geluTanhGrad';

export type ReductionOp = 'sum' | 'mean' | 'max' | 'min' | 'argmax';

export interface AdamHyper {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  /** 1-based step count after this update (for bias correction). */
  step: number;
  /** AdamW's decoupled decay (`param *= 1 - lr * wd`) instead of L2 added to the gradient. */
  decoupled: boolean;
  /** Multiply the gradient by this first (loss-scale unscaling, gradient averaging); 1 for none. */
  gradScale: number;
}

export interface SgdHyper {
  lr: number;
  momentum: number;
  dampening: number;
  weightDecay: number;
  nesterov: boolean;
  /** On the first step the momentum buffer is set to the gradient (PyTorch), not blended. */
  firstStep: boolean;
  gradScale: number;
}

export type BackendKind = 'cpu' | 'webgpu';

export interface BackendCapabilities {
  /** The adapter runs WGSL `enable f16;`. Without it f16 is packed storage, computed in f32. */
  shaderF16: boolean;
  /**
   * How this backend's kernels hold f16 tensors: `'native'` as WGSL `array<f16>` (needs
   * `shaderF16`), `'packed'` as 16-bit patterns in 32-bit words (the CPU backend: a Uint16Array).
   * The bytes and the values computed are the same either way.
   */
  f16Storage: 'native' | 'packed';
  /** Largest single storage in bytes. */
  maxStorageBytes: number;
}

/**
 * One kernel call's device work, kept by a `WorkRecorder` ([Note: a captured step on WebGPU]).
 */
export interface RecordedWork {
  /** How many commands (dispatches, copies, writes) it queues. */
  readonly commands: number;
}

/**
 * Keeps what a kernel call queued on the device and queues it again without the call's host work
 * (checks, launch building, params, bind groups): what a captured step replays on a backend whose
 * kernels are queued commands ([Note: a captured step on WebGPU]). The work's buffers are the
 * call's: they must keep their storage while it is used.
 */
export interface WorkRecorder {
  /** Runs `call` (kernel calls) and returns what it queued. */
  record(call: () => void): RecordedWork;
  /** Queues `work` again, after everything queued so far. */
  replay(work: RecordedWork): void;
  /** Frees what `record` made for `work` (its own params); `work` is not replayed after. */
  dispose(work: RecordedWork): void;
}

/**
 * A compute backend. Create one explicitly (`createBackend`); nothing is created on import.
 * The shapes each kernel accepts are documented on it; the ops layer guarantees them.
 */
export interface Backend {
  readonly kind: BackendKind;
  readonly capabilities: BackendCapabilities;
  /** Human-readable description (adapter name, driver). */
  readonly description: string;
  /** Where kernels are queued commands (WebGPU): records and replays them for a captured step. */
  readonly workRecorder?: WorkRecorder;

  // ---- memory -----------------------------------------------------------------------------
  /** Storage of at least `byteSize` bytes from the caching allocator. Throws `OutOfMemoryError`. */
  allocate(byteSize: number): RawStorage;
  /** Return storage to the pool. */
  release(storage: RawStorage): void;
  memoryStats(): MemoryStats;
  resetPeakMemoryStats(): void;
  /** Emulate a smaller device: allocations past `bytes` (allocated, not reserved) throw. */
  setMemoryLimit(bytes: number | undefined): void;
  /** Free pooled, unused storage. */
  emptyCache(): void;

  // ---- transfers --------------------------------------------------------------------------
  /**
   * Copy host data (of `dst.dtype`'s host array type, see `HostArray`) into `dst`. Without
   * `done`, `data` is the caller's again when `write` returns. With `done`, the caller lends it:
   * the backend may keep it (instead of copying it) until the write has run, and calls `done`
   * once it no longer needs it; the caller must not change it before.
   */
  write(dst: KernelTensor, data: HostArray, done?: () => void): void;
  /**
   * The tensor's elements on the host, after all queued work that writes them and before any
   * work queued after the call. With `into` (the dtype's host array type, at least the tensor's
   * elements; else `ArgumentError`), the elements go to its start and `into` is the result.
   */
  read<T extends HostArray = HostArray>(src: KernelTensor, into?: T): Promise<T>;
  /** Wait for all queued work. Rejects with a deferred kernel error (e.g. an out-of-range index). */
  sync(): Promise<void>;
  /** Release the device. Using the backend afterwards is an error. */
  dispose(): void;

  // ---- kernels ----------------------------------------------------------------------------
  /** out[i] = value (converted to out.dtype). */
  fill(out: KernelTensor, value: number): void;
  /** out = src, same dtype and element count. */
  copy(src: KernelTensor, out: KernelTensor): void;
  /**
   * out = src converted to out.dtype, bit-identical on every backend (see [Note: cast semantics] in
   * dtype-convert.ts): floats round to nearest even; float to i32 truncates toward zero and
   * saturates, NaN to 0.
   */
  cast(src: KernelTensor, out: KernelTensor): void;
  /**
   * dst[idx] = src[idx] for every idx in `shape`, both strided. Covers permute, slice, expand
   * (stride 0), concat (dst is a strided window of the output). Same dtype.
   */
  copyStrided(src: StridedOperand, dst: StridedOperand, shape: readonly number[]): void;
  /** out = op(x), same shape, float dtypes (neg, abs, square also i32). */
  unary(op: UnaryOp, x: KernelTensor, out: KernelTensor): void;
  /**
   * out = op(a, b) with NumPy broadcasting: a and b (tensors or scalars) broadcast to out.shape;
   * a tensor operand's shape is right-aligned with out's and each of its dims equals out's or is 1.
   * a, b and out share a dtype (i32 supports add, sub, mul, maximum, minimum and comparisons).
   * out may be `a` itself (the same storage, offset and shape): an update in place, as PyTorch's
   * `mul_` (clipGradNorm scales each gradient so). The CPU kernels read each element before they
   * write it; WebGPU's dispatch reads `a` from a temporary copy (a buffer may not be bound for
   * reading and writing in one dispatch: webgpu-dispatch.ts).
   */
  binary(op: BinaryOp, a: KernelTensor | number, b: KernelTensor | number, out: KernelTensor): void;
  /** out = cond != 0 ? a : b, broadcasting all three to out.shape like `binary`. */
  where(
    cond: KernelTensor,
    a: KernelTensor | number,
    b: KernelTensor | number,
    out: KernelTensor,
  ): void;
  /**
   * Reduce `x` along `axis`; out has x's shape without that axis. argmax writes i32 (first
   * maximum wins). x is viewed as [outer, x.shape[axis], inner].
   */
  reduce(op: ReductionOp, x: KernelTensor, axis: number, out: KernelTensor): void;
  /** Softmax (or log-softmax) over the last axis; out has x's shape. */
  softmax(x: KernelTensor, out: KernelTensor, log: boolean): void;
  /**
   * Optional: softmax's gradient over the last axis in one kernel, dx = y (dy - sum(dy y)) for
   * softmax's output y, with the roundings of the ops it replaces (`mul`, `sum` along the last
   * axis, `sub`, `mul`: every product and difference rounded to the dtype, the row's sum in f64 in
   * column order), so the same bits ([Note: softmax's gradient in one pass] in
   * autograd/softmax-gradient.ts). y, dy and dx have one shape and dtype. True when done;
   * backends without it, and a call it returns `false` for (having done nothing), get those ops.
   */
  softmaxBackward?(y: KernelTensor, dy: KernelTensor, dx: KernelTensor): boolean;
  /**
   * Optional: attention's weights in one call, out = softmax(maskedFill(x * scale, mask, -inf))
   * over the last axis, with the bits of those three ops (`mul` by the number, `where`, `softmax`)
   * ([Note: attention's softmax in one call] in ops/masked-softmax.ts). mask (nonzero: masked, any
   * dtype) broadcasts to x's shape (a [T, T] causal mask under [B, nh, T, T]). True when done;
   * backends without it, and a call it returns `false` for (having done nothing), get the ops.
   */
  scaledMaskedSoftmax?(
    x: KernelTensor,
    mask: KernelTensor,
    scale: number,
    out: KernelTensor,
  ): boolean;
  /**
   * Optional: the gradient of `scaledMaskedSoftmax` from its output y, dx = where(mask, 0,
   * softmaxBackward(y, dy)) * scale, with the bits of those ops. As `scaledMaskedSoftmax`.
   */
  scaledMaskedSoftmaxBackward?(
    y: KernelTensor,
    dy: KernelTensor,
    mask: KernelTensor,
    scale: number,
    dx: KernelTensor,
  ): boolean;
  /**
   * Layer norm over the last axis of x ([rows, cols] after flattening): out = (x - mean) * rstd *
   * weight + bias. weight and bias are [cols] or null. mean and rstd are f32 [rows], written for backward.
   */
  layerNorm(
    x: KernelTensor,
    weight: KernelTensor | null,
    bias: KernelTensor | null,
    eps: number,
    out: KernelTensor,
    mean: KernelTensor,
    rstd: KernelTensor,
  ): void;
  /** Gradients of layerNorm. dWeight and dBias (f32 [cols]) are overwritten, not accumulated; null to skip. */
  layerNormBackward(
    dy: KernelTensor,
    x: KernelTensor,
    weight: KernelTensor | null,
    mean: KernelTensor,
    rstd: KernelTensor,
    dx: KernelTensor,
    dWeight: KernelTensor | null,
    dBias: KernelTensor | null,
  ): void;
  /**
   * Batched matmul. a is [Ba, M, K] ([Ba, K, M] if transposeA), b is [Bb, K, N] ([Bb, N, K] if
   * transposeB), out is [B, M, N]; Ba and Bb are B or 1 (broadcast). Shapes given are 3-D.
   */
  matmul(
    a: KernelTensor,
    b: KernelTensor,
    out: KernelTensor,
    transposeA: boolean,
    transposeB: boolean,
  ): void;
  /**
   * Optional: a batched matmul over strided operands, for products of views that a contiguous
   * operand would need a copy for (attention's heads: [Note: matmul over strided views] in
   * ops/matmul-views.ts). For batch dims `batch` (possibly none), a is [...batch, m, k], b is
   * [...batch, k, n] and out is [...batch, m, n], each element at `offset + sum(i_d * strides[d])`
   * (strides >= 0, one per dim; a stride of 0 broadcasts). out = a b, or out += a b when
   * `accumulate` (then out's view may repeat elements, which each receive every product meant for
   * them, in batch order); without `accumulate` no two of out's elements coincide. a and b may
   * share storage; out overlaps neither. Same dtype. Backends without it get the ops layer's
   * fallback of `copyStrided` and `matmul`, and so does a call it returns `false` for (a backend
   * that declines it, having done nothing: WebGPU's [Note: the WebGPU strided matmul]).
   */
  matmulStrided?(
    a: StridedOperand,
    b: StridedOperand,
    out: StridedOperand,
    batch: readonly number[],
    m: number,
    k: number,
    n: number,
    accumulate: boolean,
  ): boolean | void;
  /**
   * Optional: a linear layer's forward, out = x weight^T + bias, with the bits of `matmul` (x as
   * [M, K] for M = x's size / K, weight [N, K] transposed) followed by a broadcast `add` of bias
   * [N]; out [M, N] (x's leading dims, then N). Returns true where it ran, false, having done
   * nothing, where it declines (the ops layer then runs `matmul` and `add`): the CPU backend runs
   * it for f32 with k within its gemm's one block ([Note: the bias in the gemm] in
   * backend/cpu/matmul.ts).
   */
  linear?(x: KernelTensor, weight: KernelTensor, bias: KernelTensor, out: KernelTensor): boolean;
  /**
   * Optional: causal attention over the heads of qkv [B, T, 3C] (q, k and v side by side, `nHead`
   * heads each) in one call: att [B, nHead, T, T] = softmax(maskedFill(q k^T * scale, mask, -inf))
   * for a mask [T, T] (nonzero: masked), y [B, T, C] = att v with the heads merged; the bits of
   * `matmulStrided` and `scaledMaskedSoftmax` computing the same. True where it ran, false,
   * having done nothing, where it declines (the ops layer then runs those kernels): the CPU
   * backend's [Note: attention's heads in one call] (backend/cpu/attention-kernel.ts).
   */
  attention?(
    qkv: KernelTensor,
    mask: KernelTensor,
    nHead: number,
    scale: number,
    y: KernelTensor,
    att: KernelTensor,
  ): boolean;
  /**
   * Optional: `attention`'s gradient dqkv [B, T, 3C] from the forward's att, dy [B, T, C] and
   * its operands, every element written; false, having done nothing, where it declines.
   */
  attentionBackward?(
    qkv: KernelTensor,
    att: KernelTensor,
    dy: KernelTensor,
    mask: KernelTensor,
    nHead: number,
    scale: number,
    dqkv: KernelTensor,
  ): boolean;
  /** out[n, :] = table[indices[n], :]. table [V, D], indices i32 [N], out [N, D]. Out-of-range ids are an IndexError (deferred on WebGPU to the next read/sync). */
  gather(table: KernelTensor, indices: KernelTensor, out: KernelTensor): void;
  /** out[indices[n], :] += src[n, :], deterministically. src [N, D], indices i32 [N], out [V, D]. */
  scatterAdd(src: KernelTensor, indices: KernelTensor, out: KernelTensor): void;
  /**
   * Per-row cross entropy: losses[n] = logsumexp(logits[n]) - logits[n, targets[n]], and 0 where
   * targets[n] == ignoreIndex. logits [N, C] float, targets i32 [N], losses f32 [N].
   */
  crossEntropy(
    logits: KernelTensor,
    targets: KernelTensor,
    losses: KernelTensor,
    ignoreIndex: number,
  ): void;
  /** dLogits[n] = dLosses[n] * (softmax(logits[n]) - onehot(targets[n])); 0 rows for ignored targets. dLosses f32 [N]. */
  crossEntropyBackward(
    logits: KernelTensor,
    targets: KernelTensor,
    dLosses: KernelTensor,
    dLogits: KernelTensor,
    ignoreIndex: number,
  ): void;
  /** Fused Adam / AdamW step, PyTorch's formulas, in place on f32 param, expAvg, expAvgSq; grad f32/f16/bf16. */
  adam(
    param: KernelTensor,
    grad: KernelTensor,
    expAvg: KernelTensor,
    expAvgSq: KernelTensor,
    hyper: AdamHyper,
  ): void;
  /**
   * Fused SGD with momentum, PyTorch's formulas, in place on f32 param and momentumBuffer (null
   * when momentum is 0); grad f32/f16/bf16.
   */
  sgd(
    param: KernelTensor,
    grad: KernelTensor,
    momentumBuffer: KernelTensor | null,
    hyper: SgdHyper,
  ): void;
  /** flag (i32 [1]) is set to 1 if any element of x is inf or NaN; left as is otherwise (so several checks can share a flag). */
  checkFinite(x: KernelTensor, flag: KernelTensor): void;
  /** y += alpha * x, same shape (y f32/f16/bf16, x any float). */
  axpy(alpha: number, x: KernelTensor, y: KernelTensor): void;
  /**
   * Counter-based random numbers (see `src/random/philox.ts`): element i of out uses Philox4x32-10
   * with key `seed` and counter `offset + i`, so values depend only on (seed, offset, i): the same
   * on every backend and every rank.
   */
  randomUniform(out: KernelTensor, seed: number, offset: number, low: number, high: number): void;
  randomNormal(out: KernelTensor, seed: number, offset: number, mean: number, std: number): void;
}
