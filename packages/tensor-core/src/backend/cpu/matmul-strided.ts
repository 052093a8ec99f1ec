import { bytesPerElement } from '../../dtype.js';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../../dtype-convert.js';
import type { StridedOperand } from '../backend.js';
import { type CpuStorage, rawViewAt } from './cpu-storage.js';
import { matmulScratchBytes, matmulTile } from './matmul-wasm.generated.js';
import { align16, roundUp } from './matmul-layout.js';
import { batchCall, batchLayout } from './matmul-wasm-batch.js';
import type { WasmMatmul } from './matmul-wasm.js';

/**
 * [Note: the CPU strided matmul]
 * The CPU backend's `matmulStrided`. In f32 with the WASM matmul, each operand's span of storage
 * (its lowest to its highest element) is copied into the module's memory once per call, and once
 * for both when a and b share storage (attention's q and k, both views of one [B, T, 3C] tensor),
 * and `pack` reads each batch element's matrix from there through its strides: the panels, the
 * gemm and so every bit of C are those of `matmul` on contiguous copies of the operands
 * ([Note: the WASM SIMD matmul]). A batch element whose operand sits where the previous one's
 * did (a stride of 0) is not packed again. C comes back one batch element at a time, through
 * out's strides, added to out when accumulating, in batch order. Batches of small products
 * (attention's heads) split between the matmul's threads by product, every product's C kept in
 * the module's memory until all are done ([Note: a batch of small products on the threads]).
 * Other dtypes, operands past the module's memory budget and negative strides take the
 * TypeScript loop below, which sums in f64 in k order as the TypeScript `matmul` does.
 */
export function matmulStridedKernel(
  a: StridedOperand,
  b: StridedOperand,
  out: StridedOperand,
  batch: readonly number[],
  m: number,
  k: number,
  n: number,
  accumulate: boolean,
  wasm: WasmMatmul | null,
): void {
  const count = batch.reduce((p, d) => p * d, 1);
  if (count === 0 || m === 0 || n === 0) return;
  const r = batch.length;
  if (out.strides[r + 1]! > out.strides[r]!) {
    // out is column-major (a gradient into k^T's window): compute out^T = b^T a^T instead, so C's
    // rows land along out's contiguous axis. The same products summed in the same order.
    const t = (v: StridedOperand): StridedOperand => ({
      ...v,
      strides: [...v.strides.slice(0, r), v.strides[r + 1]!, v.strides[r]!],
    });
    matmulStridedKernel(t(b), t(a), t(out), batch, n, k, m, accumulate, wasm);
    return;
  }
  const f32 = a.dtype === 'f32' && b.dtype === 'f32' && out.dtype === 'f32';
  if (f32 && wasm !== null && k > 0 && runWasm(wasm, a, b, out, batch, m, k, n, accumulate)) return;
  runTypeScript(a, b, out, batch, m, k, n, accumulate);
}

/** One past the highest element a view reaches from its offset (strides >= 0). */
function extent(dims: readonly number[], strides: readonly number[]): number {
  let e = 1;
  for (let d = 0; d < dims.length; d++) e += (dims[d]! - 1) * strides[d]!;
  return e;
}

/** Calls `visit(aOffset, bOffset, outOffset)` for every batch element, in row-major order. */
function forEachBatch(
  batch: readonly number[],
  a: StridedOperand,
  b: StridedOperand,
  out: StridedOperand,
  visit: (aAt: number, bAt: number, outAt: number) => void,
): void {
  const rank = batch.length;
  const index = new Array<number>(rank).fill(0);
  let aAt = a.offset;
  let bAt = b.offset;
  let outAt = out.offset;
  for (;;) {
    visit(aAt, bAt, outAt);
    let d = rank - 1;
    for (; d >= 0; d--) {
      index[d]!++;
      aAt += a.strides[d]!;
      bAt += b.strides[d]!;
      outAt += out.strides[d]!;
      if (index[d]! < batch[d]!) break;
      aAt -= index[d]! * a.strides[d]!;
      bAt -= index[d]! * b.strides[d]!;
      outAt -= index[d]! * out.strides[d]!;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

/**
 * Where an operand's elements go in the module's memory: its whole span (`floats` from its first
 * element, strides kept), or only its elements when the span is mostly other data (a head of
 * qkv is a third of its rows' span): contiguous runs as long as its densest dims allow, laid side
 * by side, with strides to match.
 */
interface Staging {
  floats: number;
  strides: number[];
  copy(heap: Float32Array, values: Float32Array, at: number): void;
}

function stage(offset: number, dims: readonly number[], strides: readonly number[]): Staging {
  const span = extent(dims, strides);
  const order = dims
    .map((_, d) => d)
    .filter((d) => dims[d]! > 1 && strides[d]! > 0)
    .sort((x, y) => strides[x]! - strides[y]!);
  let run = 1;
  let dense = 0;
  for (; dense < order.length && strides[order[dense]!] === run; dense++)
    run *= dims[order[dense]!]!;
  const outer = order.slice(dense);
  const count = outer.reduce((p, d) => p * dims[d]!, 1);
  if (run < 256 || run * count * 3 > span * 2) {
    return {
      floats: span,
      strides: [...strides],
      copy: (heap, values, at) => heap.set(values.subarray(offset, offset + span), at),
    };
  }
  const staged = [...strides];
  let next = run;
  for (const d of outer) {
    staged[d] = next;
    next *= dims[d]!;
  }
  return {
    floats: run * count,
    strides: staged,
    copy: (heap, values, at) => {
      const index = new Array<number>(outer.length).fill(0);
      let from = offset;
      for (let to = at; ; to += run) {
        heap.set(values.subarray(from, from + run), to);
        let i = 0;
        for (; i < outer.length; i++) {
          const d = outer[i]!;
          from += strides[d]!;
          if (++index[i]! < dims[d]!) break;
          from -= index[i]! * strides[d]!;
          index[i] = 0;
        }
        if (i === outer.length) return;
      }
    },
  };
}

function runWasm(
  wasm: WasmMatmul,
  a: StridedOperand,
  b: StridedOperand,
  out: StridedOperand,
  batch: readonly number[],
  m: number,
  k: number,
  n: number,
  accumulate: boolean,
): boolean {
  if ([a, b, out].some((t) => t.strides.some((s) => s < 0))) return false;
  const r = batch.length;
  const aDims = [...batch, m, k];
  const bDims = [...batch, k, n];
  let aStage = stage(a.offset, aDims, a.strides);
  let bStage = stage(b.offset, bDims, b.strides);
  // Operands of one storage whose spans overlap come in as one span when that is no larger.
  const aEnd = a.offset + extent(aDims, a.strides);
  const bEnd = b.offset + extent(bDims, b.strides);
  const lo = Math.min(a.offset, b.offset);
  const hi = Math.max(aEnd, bEnd);
  const union = a.storage === b.storage && hi - lo <= aStage.floats + bStage.floats;
  const first = matmulScratchBytes / 4;
  let aAt: number;
  let bAt: number;
  let rawEnd: number;
  if (union) {
    aStage = { floats: 0, strides: [...a.strides], copy: () => {} };
    bStage = { floats: 0, strides: [...b.strides], copy: () => {} };
    aAt = first + a.offset - lo;
    bAt = first + b.offset - lo;
    rawEnd = first + hi - lo;
  } else {
    aAt = first;
    bAt = align16((first + aStage.floats) * 4) / 4;
    rawEnd = bAt + bStage.floats;
  }
  const aPack = align16(rawEnd * 4);
  const bPack = aPack + roundUp(m, matmulTile.rows) * k * 4;
  const c = bPack + roundUp(n, matmulTile.columns) * k * 4;
  // Small products split between the threads by product ([Note: a batch of small products on
  // the threads]), where the memory's budget holds each thread's panels and every product's C.
  const count = batch.reduce((p, d) => p * d, 1);
  const threads = wasm.batchThreads(count, m * k * n);
  let layout = threads > 1 ? batchLayout(aPack, count, m, k, n, threads) : null;
  let heap = layout === null ? null : wasm.reserve(layout.end);
  if (heap === null) {
    layout = null;
    heap = wasm.reserve(c + m * n * 4);
  }
  if (heap === null) return false;
  const storageValues = (t: StridedOperand) => {
    const buffer = (t.storage as CpuStorage).buffer;
    return rawViewAt(buffer, 'f32', 0, buffer.byteLength / 4) as Float32Array;
  };
  if (union) heap.set(storageValues(a).subarray(lo, hi), first);
  else {
    aStage.copy(heap, storageValues(a), aAt);
    bStage.copy(heap, storageValues(b), bAt);
  }
  const o = storageValues(out);
  const stagedA = { ...a, offset: aAt, strides: aStage.strides };
  const stagedB = { ...b, offset: bAt, strides: bStage.strides };
  const [aRow, aCol] = [stagedA.strides[r]!, stagedA.strides[r + 1]!];
  const [bRow, bCol] = [stagedB.strides[r]!, stagedB.strides[r + 1]!];
  const [oRow, oCol] = [out.strides[r]!, out.strides[r + 1]!];
  const place = (from: number, outAt: number) => {
    if (!accumulate && oCol === 1 && oRow === n) o.set(heap.subarray(from, from + m * n), outAt);
    else if (oCol === 1 && n % 4 === 0) copyRows4(heap, from, o, outAt, m, n, oRow, accumulate);
    else copyRows(heap, from, o, outAt, m, n, oRow, oCol, accumulate);
  };
  if (layout !== null) {
    const table = new Int32Array(heap.buffer, layout.table, 2 * count);
    const outAts: number[] = [];
    forEachBatch(batch, stagedA, stagedB, out, (aFrom, bFrom, outAt) => {
      table[2 * outAts.length] = aFrom * 4;
      table[2 * outAts.length + 1] = bFrom * 4;
      outAts.push(outAt);
    });
    wasm.runBatch(batchCall(layout, count, m, k, n, [aRow, aCol], [bCol, bRow]), threads);
    for (let p = 0; p < count; p++) place(layout.c / 4 + p * m * n, outAts[p]!);
    return true;
  }
  const c0 = c / 4;
  let packedA = -1;
  let packedB = -1;
  forEachBatch(batch, stagedA, stagedB, out, (aFrom, bFrom, outAt) => {
    if (aFrom !== packedA) wasm.pack(aFrom * 4, aPack, m, k, matmulTile.rows, aRow, aCol);
    if (bFrom !== packedB) wasm.pack(bFrom * 4, bPack, n, k, matmulTile.columns, bCol, bRow);
    packedA = aFrom;
    packedB = bFrom;
    wasm.gemm(aPack, bPack, c, m, k, n);
    place(c0, outAt);
  });
  return true;
}

/** C's m x n rows (row-major at `from`) into out's window at `at`: set, or added to. */
function copyRows(
  c: Float32Array,
  from: number,
  o: Float32Array,
  at: number,
  m: number,
  n: number,
  oRow: number,
  oCol: number,
  accumulate: boolean,
): void {
  for (let i = 0; i < m; i++) {
    let src = from + i * n;
    let dst = at + i * oRow;
    if (accumulate) for (let j = 0; j < n; j++, src++, dst += oCol) o[dst] = o[dst]! + c[src]!;
    else for (let j = 0; j < n; j++, src++, dst += oCol) o[dst] = c[src]!;
  }
}

/** copyRows for contiguous rows of a multiple of 4 (attention's heads): four elements a step. */
function copyRows4(
  c: Float32Array,
  from: number,
  o: Float32Array,
  at: number,
  m: number,
  n: number,
  oRow: number,
  accumulate: boolean,
): void {
  for (let i = 0; i < m; i++) {
    const src = from + i * n;
    const dst = at + i * oRow;
    if (accumulate) {
      for (let j = 0; j < n; j += 4) {
        o[dst + j] = o[dst + j]! + c[src + j]!;
        o[dst + j + 1] = o[dst + j + 1]! + c[src + j + 1]!;
        o[dst + j + 2] = o[dst + j + 2]! + c[src + j + 2]!;
        o[dst + j + 3] = o[dst + j + 3]! + c[src + j + 3]!;
      }
    } else {
      for (let j = 0; j < n; j += 4) {
        o[dst + j] = c[src + j]!;
        o[dst + j + 1] = c[src + j + 1]!;
        o[dst + j + 2] = c[src + j + 2]!;
        o[dst + j + 3] = c[src + j + 3]!;
      }
    }
  }
}

type Decode = (bits: number) => number;

/** Element reads and writes of any float dtype, computed in f32 (f64 for f64: [Note: CPU stores round once per dtype]). */
function elements(t: StridedOperand): {
  get: (i: number) => number;
  set: (i: number, v: number) => void;
  /** v rounded to the dtype's values, as a store and a load would. */
  round: (v: number) => number;
} {
  const buffer = (t.storage as CpuStorage).buffer;
  const raw = rawViewAt(buffer, t.dtype, 0, buffer.byteLength / bytesPerElement(t.dtype));
  if (t.dtype === 'f16' || t.dtype === 'bf16') {
    const decode: Decode = t.dtype === 'f16' ? f16BitsToF32 : bf16BitsToF32;
    const encode = t.dtype === 'f16' ? f32ToF16Bits : f32ToBf16Bits;
    return {
      get: (i) => decode(raw[i]!),
      set: (i, v) => {
        raw[i] = encode(Math.fround(v));
      },
      round: (v) => decode(encode(Math.fround(v))),
    };
  }
  const round = t.dtype === 'f64' ? (v: number) => v : Math.fround;
  return {
    get: (i) => raw[i]!,
    set: (i, v) => {
      raw[i] = round(v);
    },
    round,
  };
}

function runTypeScript(
  a: StridedOperand,
  b: StridedOperand,
  out: StridedOperand,
  batch: readonly number[],
  m: number,
  k: number,
  n: number,
  accumulate: boolean,
): void {
  const r = batch.length;
  const av = elements(a);
  const bv = elements(b);
  const ov = elements(out);
  // The product rounds to out's dtype as `matmul` writes it; accumulating adds that to out.
  const [aRow, aCol, bRow, bCol] = [
    a.strides[r]!,
    a.strides[r + 1]!,
    b.strides[r]!,
    b.strides[r + 1]!,
  ];
  const [oRow, oCol] = [out.strides[r]!, out.strides[r + 1]!];
  forEachBatch(batch, a, b, out, (aAt, bAt, outAt) => {
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let sum = 0;
        for (let t = 0; t < k; t++) {
          sum += av.get(aAt + i * aRow + t * aCol) * bv.get(bAt + t * bRow + j * bCol);
        }
        const at = outAt + i * oRow + j * oCol;
        const product = ov.round(sum);
        ov.set(at, accumulate ? ov.get(at) + product : product);
      }
    }
  });
}
