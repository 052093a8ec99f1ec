import { bytesPerElement } from '../../dtype.js';
import type { HostArray } from '../../dtype.js';
import { saturateToI32 } from '../../dtype-convert.js';
import { IndexError } from '../../errors.js';
import { checkReadTarget, PooledBackend } from '../pooled-backend.js';
import { CachingAllocator, type MemoryStats } from '../../memory/caching-allocator.js';
import { philoxNormal, philoxUniform } from '../../random/philox.js';
import type {
  AdamHyper,
  Backend,
  BackendCapabilities,
  BinaryOp,
  KernelTensor,
  RawStorage,
  ReduceOp,
  SgdHyper,
  StridedOperand,
  UnaryOp,
} from '../backend.js';
import {
  type CpuStorage,
  inoutValues,
  outputValues,
  rawView,
  rawViewAt,
  readValues,
  shapeCount,
  type Values,
} from './cpu-storage.js';
import { gelu, geluDerivative, geluTanh, geluTanhDerivative, sigmoid } from './math.js';
import { matmulBlock, toRowMajor } from './matmul.js';

/** Options of `createCpuBackend`. */
export interface CpuBackendOptions {
  /** Emulated device memory in bytes: allocations past it throw `OutOfMemoryError`. */
  memoryLimit?: number;
}

type Scalar2 = (x: number, y: number) => number;

const unaryFunctions: Record<UnaryOp, (x: number) => number> = {
  neg: (x) => -x,
  abs: Math.abs,
  exp: Math.exp,
  log: Math.log,
  sqrt: Math.sqrt,
  rsqrt: (x) => 1 / Math.sqrt(x),
  tanh: Math.tanh,
  sigmoid,
  relu: (x) => (x > 0 ? x : x === 0 || x < 0 ? 0 : x),
  gelu,
  geluTanh,
  square: (x) => x * x,
  reciprocal: (x) => 1 / x,
};

const binaryFunctions: Record<BinaryOp, Scalar2> = {
  add: (x, y) => x + y,
  sub: (x, y) => x - y,
  mul: (x, y) => x * y,
  div: (x, y) => x / y,
  pow: Math.pow,
  maximum: (x, y) => (Number.isNaN(x) || Number.isNaN(y) ? Number.NaN : Math.max(x, y)),
  minimum: (x, y) => (Number.isNaN(x) || Number.isNaN(y) ? Number.NaN : Math.min(x, y)),
  eq: (x, y) => (x === y ? 1 : 0),
  ne: (x, y) => (x !== y ? 1 : 0),
  lt: (x, y) => (x < y ? 1 : 0),
  le: (x, y) => (x <= y ? 1 : 0),
  gt: (x, y) => (x > y ? 1 : 0),
  ge: (x, y) => (x >= y ? 1 : 0),
  reluGrad: (x, dy) => (x > 0 ? dy : 0),
  geluGrad: (x, dy) => dy * geluDerivative(x),
  geluTanhGrad: (x, dy) => dy * geluTanhDerivative(x),
};

/** Strides of `shape` right-aligned against `outShape`, 0 on broadcast (size-1 or missing) dims. */
function broadcastStrides(shape: readonly number[], outShape: readonly number[]): number[] {
  const rank = outShape.length;
  const strides = new Array<number>(rank).fill(0);
  let stride = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    const d = shape[i]!;
    const o = rank - shape.length + i;
    strides[o] = d === 1 && outShape[o] !== 1 ? 0 : stride;
    stride *= d;
  }
  return strides;
}

type Operand = { values: Values; strides: number[] } | number;

/**
 * Visit `outShape` row by row (the last dim is the row), giving each operand's element offset at
 * the row start; the callback walks the row with the operands' last strides.
 */
function forEachRow(
  outShape: readonly number[],
  strides: number[][],
  visit: (row: number, bases: number[]) => void,
): void {
  const rank = outShape.length;
  const size = shapeCount(outShape);
  if (size === 0) return;
  const cols = rank === 0 ? 1 : outShape[rank - 1]!;
  const rows = size / cols;
  const index = new Array<number>(Math.max(rank - 1, 0)).fill(0);
  const bases = strides.map(() => 0);
  for (let row = 0; row < rows; row++) {
    visit(row, bases);
    for (let d = rank - 2; d >= 0; d--) {
      index[d]!++;
      for (let s = 0; s < strides.length; s++) bases[s] = bases[s]! + strides[s]![d]!;
      if (index[d]! < outShape[d]!) break;
      for (let s = 0; s < strides.length; s++) {
        bases[s] = bases[s]! - strides[s]![d]! * outShape[d]!;
      }
      index[d] = 0;
    }
  }
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

/**
 * The CPU backend: every kernel of the contract in plain TypeScript over ArrayBuffers.
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
  readonly description = 'CPU (TypeScript kernels)';

  constructor(options: CpuBackendOptions = {}) {
    super(
      new CachingAllocator<ArrayBuffer>(
        { create: (byteSize) => new ArrayBuffer(byteSize), destroy: () => {} },
        'cpu',
      ),
      'cpu',
    );
    this.allocator.setLimit(options.memoryLimit);
  }

  // ---- external memory --------------------------------------------------------------------
  private readonly external = new WeakMap<RawStorage, { bytes: number; onRelease?: () => void }>();
  private externalBytes = 0;
  private peakExternalBytes = 0;

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
    const raw: CpuStorage = { buffer: buffer as ArrayBuffer, byteSize };
    this.external.set(raw, { bytes: ownedBytes, onRelease });
    this.externalBytes += ownedBytes;
    this.peakExternalBytes = Math.max(this.peakExternalBytes, this.externalBytes);
    return raw;
  }

  override release(storage: RawStorage): void {
    const entry = this.external.get(storage);
    if (entry !== undefined) {
      this.external.delete(storage);
      this.externalBytes -= entry.bytes;
      entry.onRelease?.();
      return;
    }
    super.release(storage);
  }

  override memoryStats(): MemoryStats {
    return {
      ...super.memoryStats(),
      externalBytes: this.externalBytes,
      peakExternalBytes: this.peakExternalBytes,
    };
  }

  override resetPeakMemoryStats(): void {
    super.resetPeakMemoryStats();
    this.peakExternalBytes = this.externalBytes;
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
    this.lifecycle = 'disposed';
  }

  // ---- kernels ----------------------------------------------------------------------------
  fill(out: KernelTensor, value: number): void {
    this.assertLive('fill');
    const o = outputValues(out);
    o.values.fill(value);
    o.commit();
  }

  copy(src: KernelTensor, out: KernelTensor): void {
    this.assertLive('copy');
    rawView(out).set(rawView(src) as never);
  }

  cast(src: KernelTensor, out: KernelTensor): void {
    this.assertLive('cast');
    if (src.dtype === out.dtype) {
      this.copy(src, out);
      return;
    }
    const x = readValues(src);
    const o = outputValues(out);
    const v = o.values;
    if (out.dtype === 'i32') {
      // See [Note: cast semantics]: truncate, saturate, NaN -> 0.
      for (let i = 0; i < x.length; i++) v[i] = saturateToI32(x[i]!);
    } else if (out.dtype === 'f16' || out.dtype === 'bf16') {
      // Through f32 first: the contract computes in f32 and rounds f32 to the 16-bit format.
      for (let i = 0; i < x.length; i++) v[i] = Math.fround(x[i]!);
    } else {
      v.set(x);
    }
    o.commit();
  }

  copyStrided(src: StridedOperand, dst: StridedOperand, shape: readonly number[]): void {
    this.assertLive('copyStrided');
    const size = shapeCount(shape);
    if (size === 0) return;
    const bpe = bytesPerElement(src.dtype);
    const srcBuffer = (src.storage as CpuStorage).buffer;
    const dstBuffer = (dst.storage as CpuStorage).buffer;
    const s = rawViewAt(srcBuffer, src.dtype, 0, srcBuffer.byteLength / bpe);
    const d = rawViewAt(dstBuffer, dst.dtype, 0, dstBuffer.byteLength / bpe);
    const rank = shape.length;
    if (rank === 0) {
      d[dst.offset] = s[src.offset]!;
      return;
    }
    const cols = shape[rank - 1]!;
    const ss = src.strides[rank - 1]!;
    const ds = dst.strides[rank - 1]!;
    const rowShape = shape.slice(0, rank - 1);
    forEachRow([...rowShape, 1], [[...src.strides], [...dst.strides]], (_row, bases) => {
      let si = src.offset + bases[0]!;
      let di = dst.offset + bases[1]!;
      for (let c = 0; c < cols; c++, si += ss, di += ds) d[di] = s[si]!;
    });
  }

  unary(op: UnaryOp, x: KernelTensor, out: KernelTensor): void {
    this.assertLive('unary');
    const f = unaryFunctions[op];
    const xv = readValues(x);
    const o = outputValues(out);
    const v = o.values;
    for (let i = 0; i < xv.length; i++) v[i] = f(xv[i]!);
    o.commit();
  }

  binary(
    op: BinaryOp,
    a: KernelTensor | number,
    b: KernelTensor | number,
    out: KernelTensor,
  ): void {
    this.assertLive('binary');
    const f =
      out.dtype === 'i32' && op === 'mul'
        ? (x: number, y: number) => Math.imul(x, y)
        : binaryFunctions[op];
    this.broadcastMap([a, b], out, (values) => f(values[0]!, values[1]!));
  }

  where(
    cond: KernelTensor,
    a: KernelTensor | number,
    b: KernelTensor | number,
    out: KernelTensor,
  ): void {
    this.assertLive('where');
    this.broadcastMap([cond, a, b], out, (values) => (values[0] !== 0 ? values[1]! : values[2]!));
  }

  /** out = f(operands...) with NumPy broadcasting; operands are tensors or scalars. */
  private broadcastMap(
    inputs: (KernelTensor | number)[],
    out: KernelTensor,
    f: (values: number[]) => number,
  ): void {
    const o = outputValues(out);
    const v = o.values;
    const operands: Operand[] = inputs.map((t) =>
      typeof t === 'number'
        ? t
        : { values: readValues(t), strides: broadcastStrides(t.shape, out.shape) },
    );
    const args = new Array<number>(inputs.length).fill(0);
    const flat = inputs.every((t) => typeof t === 'number' || sameShape(t.shape, out.shape));
    for (let s = 0; s < operands.length; s++) {
      const operand = operands[s]!;
      if (typeof operand === 'number') args[s] = operand;
    }
    if (flat) {
      const arrays = operands.map((operand) =>
        typeof operand === 'number' ? null : operand.values,
      );
      if (arrays.length === 2) {
        const [x, y] = arrays;
        const ax = args;
        for (let i = 0; i < v.length; i++) {
          if (x) ax[0] = x[i]!;
          if (y) ax[1] = y[i]!;
          v[i] = f(ax);
        }
      } else {
        for (let i = 0; i < v.length; i++) {
          for (let s = 0; s < arrays.length; s++) {
            const arr = arrays[s];
            if (arr) args[s] = arr[i]!;
          }
          v[i] = f(args);
        }
      }
      o.commit();
      return;
    }
    const rank = out.shape.length;
    const cols = rank === 0 ? 1 : out.shape[rank - 1]!;
    const tensorOperands = operands.filter((op) => typeof op !== 'number') as {
      values: Values;
      strides: number[];
    }[];
    const slots = operands.flatMap((op, s) => (typeof op === 'number' ? [] : [s]));
    const lastStrides = tensorOperands.map((op) => (rank === 0 ? 0 : op.strides[rank - 1]!));
    forEachRow(
      out.shape,
      tensorOperands.map((op) => op.strides),
      (row, bases) => {
        const outBase = row * cols;
        for (let c = 0; c < cols; c++) {
          for (let t = 0; t < tensorOperands.length; t++) {
            args[slots[t]!] = tensorOperands[t]!.values[bases[t]! + c * lastStrides[t]!]!;
          }
          v[outBase + c] = f(args);
        }
      },
    );
    o.commit();
  }

  reduce(op: ReduceOp, x: KernelTensor, axis: number, out: KernelTensor): void {
    this.assertLive('reduce');
    const shape = x.shape;
    let outer = 1;
    for (let i = 0; i < axis; i++) outer *= shape[i]!;
    const r = shape[axis]!;
    let inner = 1;
    for (let i = axis + 1; i < shape.length; i++) inner *= shape[i]!;
    const xv = readValues(x);
    const o = outputValues(out);
    const v = o.values;
    for (let p = 0; p < outer; p++) {
      for (let q = 0; q < inner; q++) {
        const base = p * r * inner + q;
        let result: number;
        if (op === 'sum' || op === 'mean') {
          let acc = 0;
          for (let k = 0; k < r; k++) acc += xv[base + k * inner]!;
          result = op === 'mean' ? acc / r : acc;
        } else if (op === 'argmax') {
          let best = Number.NEGATIVE_INFINITY;
          let bestIndex = 0;
          for (let k = 0; k < r; k++) {
            const value = xv[base + k * inner]!;
            if (Number.isNaN(value)) {
              bestIndex = k;
              break;
            }
            if (value > best || k === 0) {
              best = value;
              bestIndex = k;
            }
          }
          result = bestIndex;
        } else {
          const isMax = op === 'max';
          let best = isMax ? Number.NEGATIVE_INFINITY : Number.POSITIVE_INFINITY;
          for (let k = 0; k < r; k++) {
            const value = xv[base + k * inner]!;
            if (Number.isNaN(value)) {
              best = value;
              break;
            }
            if (isMax ? value > best : value < best) best = value;
          }
          result = best;
        }
        v[p * inner + q] = result;
      }
    }
    o.commit();
  }

  softmax(x: KernelTensor, out: KernelTensor, log: boolean): void {
    this.assertLive('softmax');
    const xv = readValues(x);
    const o = outputValues(out);
    const v = o.values;
    const cols = x.shape.length === 0 ? 1 : x.shape[x.shape.length - 1]!;
    if (cols === 0) return;
    const rows = xv.length / cols;
    for (let r = 0; r < rows; r++) {
      const base = r * cols;
      let max = Number.NEGATIVE_INFINITY;
      for (let c = 0; c < cols; c++) max = Math.max(max, xv[base + c]!);
      if (max === Number.NEGATIVE_INFINITY) max = 0;
      let sum = 0;
      for (let c = 0; c < cols; c++) sum += Math.exp(xv[base + c]! - max);
      if (log) {
        const logSum = Math.log(sum) + max;
        for (let c = 0; c < cols; c++) v[base + c] = xv[base + c]! - logSum;
      } else {
        for (let c = 0; c < cols; c++) v[base + c] = Math.exp(xv[base + c]! - max) / sum;
      }
    }
    o.commit();
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
    const xv = readValues(x);
    const w = weight ? readValues(weight) : null;
    const bv = bias ? readValues(bias) : null;
    const o = outputValues(out);
    const m = outputValues(mean);
    const s = outputValues(rstd);
    const cols = x.shape[x.shape.length - 1]!;
    const rows = cols === 0 ? 0 : xv.length / cols;
    for (let r = 0; r < rows; r++) {
      const base = r * cols;
      let sum = 0;
      for (let c = 0; c < cols; c++) sum += xv[base + c]!;
      const mu = sum / cols;
      let sq = 0;
      for (let c = 0; c < cols; c++) {
        const d = xv[base + c]! - mu;
        sq += d * d;
      }
      const inv = 1 / Math.sqrt(sq / cols + eps);
      m.values[r] = mu;
      s.values[r] = inv;
      for (let c = 0; c < cols; c++) {
        let y = (xv[base + c]! - mu) * inv;
        if (w) y *= w[c]!;
        if (bv) y += bv[c]!;
        o.values[base + c] = y;
      }
    }
    o.commit();
    m.commit();
    s.commit();
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
    const dyv = readValues(dy);
    const xv = readValues(x);
    const w = weight ? readValues(weight) : null;
    const mv = readValues(mean);
    const sv = readValues(rstd);
    const cols = x.shape[x.shape.length - 1]!;
    const rows = cols === 0 ? 0 : xv.length / cols;
    const o = outputValues(dx);
    const dw = new Float64Array(cols);
    const db = new Float64Array(cols);
    for (let r = 0; r < rows; r++) {
      const base = r * cols;
      const mu = mv[r]!;
      const inv = sv[r]!;
      let sumG = 0;
      let sumGX = 0;
      for (let c = 0; c < cols; c++) {
        const xhat = (xv[base + c]! - mu) * inv;
        const g = dyv[base + c]! * (w ? w[c]! : 1);
        sumG += g;
        sumGX += g * xhat;
        dw[c] = dw[c]! + dyv[base + c]! * xhat;
        db[c] = db[c]! + dyv[base + c]!;
      }
      const meanG = sumG / cols;
      const meanGX = sumGX / cols;
      for (let c = 0; c < cols; c++) {
        const xhat = (xv[base + c]! - mu) * inv;
        const g = dyv[base + c]! * (w ? w[c]! : 1);
        o.values[base + c] = inv * (g - meanG - xhat * meanGX);
      }
    }
    o.commit();
    if (dWeight) {
      const out = outputValues(dWeight);
      out.values.set(dw);
      out.commit();
    }
    if (dBias) {
      const out = outputValues(dBias);
      out.values.set(db);
      out.commit();
    }
  }

  matmul(
    a: KernelTensor,
    b: KernelTensor,
    out: KernelTensor,
    transposeA: boolean,
    transposeB: boolean,
  ): void {
    this.assertLive('matmul');
    const [batch, m, n] = out.shape as [number, number, number];
    const k = transposeA ? a.shape[1]! : a.shape[2]!;
    const av = readValues(a);
    const bv = readValues(b);
    const o = outputValues(out);
    const batchA = a.shape[0]!;
    const batchB = b.shape[0]!;
    const acc = new Float64Array(m * n);
    const aMat = new Float64Array(m * k);
    const bMat = new Float64Array(k * n);
    for (let p = 0; p < batch; p++) {
      // A [M, K] is stored [K, M] when transposeA; B [K, N] is stored [N, K] when transposeB.
      if (p === 0 || batchA !== 1) {
        const [rows, cols] = transposeA ? [k, m] : [m, k];
        toRowMajor(av, (batchA === 1 ? 0 : p) * m * k, rows, cols, transposeA, aMat);
      }
      if (p === 0 || batchB !== 1) {
        const [rows, cols] = transposeB ? [n, k] : [k, n];
        toRowMajor(bv, (batchB === 1 ? 0 : p) * k * n, rows, cols, transposeB, bMat);
      }
      matmulBlock(aMat, bMat, acc, m, k, n);
      o.values.set(acc, p * m * n);
    }
    o.commit();
  }

  gather(table: KernelTensor, indices: KernelTensor, out: KernelTensor): void {
    this.assertLive('gather');
    const [rows, dim] = table.shape as [number, number];
    const t = rawView(table);
    const ids = rawView(indices) as Int32Array;
    const o = rawView(out);
    for (let n = 0; n < ids.length; n++) {
      const id = ids[n]!;
      if (id < 0 || id >= rows) throw new IndexError('gather', id, rows, `indices[${n}]`);
      o.set(t.subarray(id * dim, id * dim + dim) as never, n * dim);
    }
  }

  scatterAdd(src: KernelTensor, indices: KernelTensor, out: KernelTensor): void {
    this.assertLive('scatterAdd');
    const [rows, dim] = out.shape as [number, number];
    const ids = rawView(indices) as Int32Array;
    for (let n = 0; n < ids.length; n++) {
      const id = ids[n]!;
      if (id < 0 || id >= rows) throw new IndexError('scatterAdd', id, rows, `indices[${n}]`);
    }
    const s = readValues(src);
    const o = inoutValues(out);
    // Accumulate in doubles, then round once: deterministic and order-independent up to the final store.
    const acc = Float64Array.from(o.values);
    for (let n = 0; n < ids.length; n++) {
      const base = ids[n]! * dim;
      for (let d = 0; d < dim; d++) acc[base + d] = acc[base + d]! + s[n * dim + d]!;
    }
    o.values.set(acc);
    o.commit();
  }

  crossEntropy(
    logits: KernelTensor,
    targets: KernelTensor,
    losses: KernelTensor,
    ignoreIndex: number,
  ): void {
    this.assertLive('crossEntropy');
    const [rows, classes] = logits.shape as [number, number];
    const t = rawView(targets) as Int32Array;
    this.checkTargets(t, classes, ignoreIndex);
    const x = readValues(logits);
    const o = outputValues(losses);
    for (let r = 0; r < rows; r++) {
      const target = t[r]!;
      if (target === ignoreIndex) {
        o.values[r] = 0;
        continue;
      }
      const base = r * classes;
      o.values[r] = logSumExp(x, base, classes) - x[base + target]!;
    }
    o.commit();
  }

  crossEntropyBackward(
    logits: KernelTensor,
    targets: KernelTensor,
    dLosses: KernelTensor,
    dLogits: KernelTensor,
    ignoreIndex: number,
  ): void {
    this.assertLive('crossEntropyBackward');
    const [rows, classes] = logits.shape as [number, number];
    const t = rawView(targets) as Int32Array;
    this.checkTargets(t, classes, ignoreIndex);
    const x = readValues(logits);
    const dl = readValues(dLosses);
    const o = outputValues(dLogits);
    for (let r = 0; r < rows; r++) {
      const target = t[r]!;
      const base = r * classes;
      if (target === ignoreIndex) {
        o.values.fill(0, base, base + classes);
        continue;
      }
      const lse = logSumExp(x, base, classes);
      const g = dl[r]!;
      for (let c = 0; c < classes; c++) {
        o.values[base + c] = g * (Math.exp(x[base + c]! - lse) - (c === target ? 1 : 0));
      }
    }
    o.commit();
  }

  private checkTargets(targets: Int32Array, classes: number, ignoreIndex: number): void {
    for (let r = 0; r < targets.length; r++) {
      const target = targets[r]!;
      if (target !== ignoreIndex && (target < 0 || target >= classes)) {
        throw new IndexError('crossEntropy', target, classes, `targets[${r}]`);
      }
    }
  }

  adam(
    param: KernelTensor,
    grad: KernelTensor,
    expAvg: KernelTensor,
    expAvgSq: KernelTensor,
    hyper: AdamHyper,
  ): void {
    this.assertLive('adam');
    const p = inoutValues(param);
    const g = readValues(grad);
    const m = inoutValues(expAvg);
    const v = inoutValues(expAvgSq);
    const { lr, beta1, beta2, eps, weightDecay, step, decoupled, gradScale } = hyper;
    const bias1 = 1 - beta1 ** step;
    const bias2Sqrt = Math.sqrt(1 - beta2 ** step);
    const stepSize = lr / bias1;
    const pv = p.values;
    const mv = m.values;
    const vv = v.values;
    for (let i = 0; i < pv.length; i++) {
      let param_ = pv[i]!;
      let gi = g[i]! * gradScale;
      if (weightDecay !== 0) {
        if (decoupled) param_ *= 1 - lr * weightDecay;
        else gi += weightDecay * param_;
      }
      const mi = beta1 * mv[i]! + (1 - beta1) * gi;
      const vi = beta2 * vv[i]! + (1 - beta2) * gi * gi;
      mv[i] = mi;
      vv[i] = vi;
      pv[i] = param_ - (stepSize * mi) / (Math.sqrt(vi) / bias2Sqrt + eps);
    }
    p.commit();
    m.commit();
    v.commit();
  }

  sgd(
    param: KernelTensor,
    grad: KernelTensor,
    momentumBuffer: KernelTensor | null,
    hyper: SgdHyper,
  ): void {
    this.assertLive('sgd');
    const p = inoutValues(param);
    const g = readValues(grad);
    const buf = momentumBuffer ? inoutValues(momentumBuffer) : null;
    const { lr, momentum, dampening, weightDecay, nesterov, firstStep, gradScale } = hyper;
    const pv = p.values;
    for (let i = 0; i < pv.length; i++) {
      let gi = g[i]! * gradScale;
      if (weightDecay !== 0) gi += weightDecay * pv[i]!;
      if (buf && momentum !== 0) {
        const b = firstStep ? gi : momentum * buf.values[i]! + (1 - dampening) * gi;
        buf.values[i] = b;
        gi = nesterov ? gi + momentum * b : b;
      }
      pv[i] = pv[i]! - lr * gi;
    }
    p.commit();
    buf?.commit();
  }

  checkFinite(x: KernelTensor, flag: KernelTensor): void {
    this.assertLive('checkFinite');
    const xv = readValues(x);
    for (let i = 0; i < xv.length; i++) {
      if (!Number.isFinite(xv[i]!)) {
        (rawView(flag) as Int32Array)[0] = 1;
        return;
      }
    }
  }

  axpy(alpha: number, x: KernelTensor, y: KernelTensor): void {
    this.assertLive('axpy');
    const xv = readValues(x);
    const o = inoutValues(y);
    const v = o.values;
    for (let i = 0; i < v.length; i++) v[i] = v[i]! + alpha * xv[i]!;
    o.commit();
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

function logSumExp(x: Values, base: number, count: number): number {
  let max = Number.NEGATIVE_INFINITY;
  for (let c = 0; c < count; c++) max = Math.max(max, x[base + c]!);
  if (max === Number.NEGATIVE_INFINITY) return max;
  let sum = 0;
  for (let c = 0; c < count; c++) sum += Math.exp(x[base + c]! - max);
  return Math.log(sum) + max;
}
