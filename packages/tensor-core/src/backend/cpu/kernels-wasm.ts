import type { AdamHyper, BinaryOp, KernelTensor, ReductionOp, UnaryOp } from '../backend.js';
import { broadcastKind } from './broadcast-kind.js';
import { shapeCount } from './cpu-storage.js';
import { kernelsWasmBase64 } from './kernels-wasm.generated.js';
import {
  scaledMaskedSoftmaxBackwardWasm,
  scaledMaskedSoftmaxWasm,
} from './kernels-wasm-attention.js';
import {
  layerNormBackwardWasm,
  layerNormWasm,
  softmaxBackwardWasm,
  softmaxWasm,
} from './kernels-wasm-rows.js';
import type { WasmApi } from './matmul-wasm-load.js';
import { type Exports, KEEP_BYTES, WasmMemory } from './wasm-memory.js';

/**
 * [Note: the WASM SIMD kernels]
 * Besides matmul, the CPU backend's hottest f32 kernels in a training step run as WebAssembly
 * SIMD, from hand-written WAT that generate-kernels-wasm.mjs writes and assembles (kernels.wat
 * beside it, the bytes checked in as kernels-wasm.generated.ts), as the matmul is built. Each call
 * copies its operands into the module's memory, runs, and copies the result out; the TypeScript
 * kernels stay the reference and run every case this does not take (other dtypes, ops and
 * broadcasts), and everywhere with `createCpuBackend({ kernels: 'typescript' })` or without
 * WebAssembly SIMD.
 *
 * - Elementwise add, sub, mul, div, square: f32x4 arithmetic on f32 operands rounds once, as the
 *   TypeScript kernel's f64 arithmetic rounded to f32 does (f64 holds more than twice f32's
 *   precision), so results agree bit for bit. A JavaScript number operand is applied in f64 two
 *   lanes at a time, again as the TypeScript kernel does; one that is an f32 value (0.125, a
 *   clipping coefficient made with `Math.fround`) in f32 lanes four at a time, which rounds the
 *   same way for the same reason. Broadcasts taken: an operand repeating
 *   every row of the output (a bias: its shape is the output's trailing dims), one value per row
 *   (its shape is the output's leading dims), or a single element.
 * - where with a repeating (or same-shape) condition, one scalar and one same-shape tensor (the
 *   attention mask): a select, bit for bit.
 * - Sums and means along an axis: each output summed in f64 in index order and rounded once, as
 *   the TypeScript kernel sums, so bit for bit, two columns per f64x2 lane pair.
 * - Layer norm forward and backward, and the fused Adam/AdamW update (kernels-wat-f64.mjs): the
 *   TypeScript kernels' f64 arithmetic, op for op, row sums as f64 adds in index order (two rows
 *   at a time, one a lane: [Note: two rows in two lanes]) and the per-element work in f64x2
 *   lanes, so bit for bit as well.
 * - GELU (erf form) and its gradient in f32 lanes, PyTorch's f32 formulas: erf by Eigen's and XLA's
 *   f32 rational, exp by Cephes' expf polynomial; softmax with that exp and an f64 sum. Within
 *   PyTorch's f32 tolerance of f64 (gelu-f32.test.ts: abs error 1.1e-6 at most, where 1 + erf
 *   cancels), and `toleranceFor('f32')` of the TypeScript kernels' f64 erf and Math.exp.
 * - Every kernel is a fixed sequence of instructions per element, so results are the same on every
 *   run and engine (no relaxed SIMD here) whatever the matmul's thread count. Each runs on the
 *   calling thread, but large GELU maps, which the matmul's module also carries, run on the
 *   matmul's threads with the same bits ([Note: GELU on the matmul's threads] in gelu-threads.ts).
 * - Memory. Each backend has its own instance; its memory grows to the largest call's operands and
 *   is kept for reuse (scratch, so not in `memoryStats`).
 */

type Binary4 = 'add' | 'sub' | 'mul' | 'div';

const BINARY4 = new Set<BinaryOp>(['add', 'sub', 'mul', 'div']);

/** The WASM SIMD f32 kernels over one module instance, whose memory only grows. */
export class WasmKernels {
  private readonly memory: WasmMemory;

  /**
   * `renew`: a fresh instance of the module, to let go of a memory grown past `keepBytes` (see
   * [Note: the WASM kernels' memory]); without it the memory is kept whatever its size.
   */
  constructor(exports: Exports, renew: (() => Exports) | null = null, keepBytes = KEEP_BYTES) {
    this.memory = new WasmMemory(exports, renew, keepBytes);
  }

  private get exports(): Exports {
    return this.memory.exports;
  }

  /** Bytes of the module's memory: the operands of the largest call so far. */
  get scratchBytes(): number {
    return this.memory.scratchBytes;
  }

  /** out = a op b for the ops and broadcasts the module has; false (nothing written) otherwise. */
  binary(
    op: BinaryOp,
    a: KernelTensor | number,
    b: KernelTensor | number,
    out: KernelTensor,
  ): boolean {
    if (out.dtype !== 'f32' || !isF32(a) || !isF32(b)) return false;
    const n = shapeCount(out.shape);
    if (n === 0) return false;
    if (op === 'geluGrad') {
      if (typeof a === 'number' || typeof b === 'number') return false;
      if (broadcastKind(a.shape, out.shape)?.kind !== 'same') return false;
      if (broadcastKind(b.shape, out.shape)?.kind !== 'same') return false;
      const at = this.memory.layout([n, n, n]);
      if (at === null) return false;
      const [pa, pb, po] = at as [number, number, number];
      this.memory.put(a, pa);
      this.memory.put(b, pb);
      this.exports.gelu_grad!(pa, pb, po, n);
      this.memory.take(out, po, n);
      return true;
    }
    if (!BINARY4.has(op)) return false;
    const name = op as Binary4;
    if (typeof a === 'number' || typeof b === 'number') {
      const tensor = typeof a === 'number' ? b : a;
      if (typeof tensor === 'number') return false;
      if (broadcastKind(tensor.shape, out.shape)?.kind !== 'same') return false;
      const piece = this.memory.piece(n, 2);
      for (let from = 0; from < n; from += piece) {
        const count = Math.min(piece, n - from);
        const at = this.memory.layout([count, count]);
        if (at === null) return false;
        const [px, po] = at as [number, number];
        this.memory.putRange(tensor, px, from, count);
        const s = (typeof b === 'number' ? b : a) as number;
        const f32 = Math.fround(s) === s || Number.isNaN(s); // then f32 lanes: the same bits
        const kind = typeof b === 'number' ? (f32 ? 'vf' : 'vs') : f32 ? 'fv' : 'sv';
        this.exports[`${name}_${kind}`]!(px, s, po, count);
        this.memory.take(out, po, count, from);
      }
      return true;
    }
    const ka = broadcastKind(a.shape, out.shape);
    const kb = broadcastKind(b.shape, out.shape);
    if (ka === null || kb === null) return false;
    if (ka.kind === 'same' && kb.kind === 'same') {
      const piece = this.memory.piece(n, 3);
      for (let from = 0; from < n; from += piece) {
        const count = Math.min(piece, n - from);
        const at = this.memory.layout([count, count, count]);
        if (at === null) return false;
        const [pa, pb, po] = at as [number, number, number];
        this.memory.putRange(a, pa, from, count);
        this.memory.putRange(b, pb, from, count);
        this.exports[`${name}_vv`]!(pa, pb, po, count);
        this.memory.take(out, po, count, from);
      }
      return true;
    }
    const at = this.memory.layout([shapeCount(a.shape), shapeCount(b.shape), n]);
    if (at === null) return false;
    const [pa, pb, po] = at as [number, number, number];
    if (ka.kind === 'same' && kb.kind === 'same') {
      this.memory.put(a, pa);
      this.memory.put(b, pb);
      this.exports[`${name}_vv`]!(pa, pb, po, n);
    } else if (ka.kind === 'same' || kb.kind === 'same') {
      const other = ka.kind === 'same' ? kb : ka;
      const suffix =
        ka.kind === 'same'
          ? other.kind === 'repeat'
            ? 'vr'
            : 'vc'
          : other.kind === 'repeat'
            ? 'rv'
            : 'cv';
      const cols = other.kind === 'repeat' ? other.period : (other as { inner: number }).inner;
      this.memory.put(a, pa);
      this.memory.put(b, pb);
      this.exports[`${name}_${suffix}`]!(pa, pb, po, n / cols, cols);
    } else {
      return false;
    }
    this.memory.take(out, po, n);
    return true;
  }

  /** out = f(x) for gelu and square; false otherwise. */
  unary(op: UnaryOp, x: KernelTensor, out: KernelTensor): boolean {
    if (x.dtype !== 'f32' || out.dtype !== 'f32' || (op !== 'gelu' && op !== 'square'))
      return false;
    const n = shapeCount(out.shape);
    const piece = n === 0 ? n : this.memory.piece(n, 2);
    if (piece < n) {
      for (let from = 0; from < n; from += piece) {
        const shape = [Math.min(piece, n - from)];
        const part = (t: KernelTensor): KernelTensor => ({ ...t, shape, offset: t.offset + from });
        if (!this.unary(op, part(x), part(out))) return false;
      }
      return true;
    }
    const at = n === 0 ? null : this.memory.layout([n, n]);
    if (at === null) return false;
    const [px, po] = at as [number, number];
    this.memory.put(x, px);
    if (op === 'gelu') this.exports.gelu!(px, po, n);
    else this.exports.mul_vv!(px, px, po, n);
    this.memory.take(out, po, n);
    return true;
  }

  /**
   * out = cond != 0 ? a : b where one of a, b is a number and the other has the output's shape,
   * and cond repeats every row (or has the output's shape); false otherwise.
   */
  where(
    cond: KernelTensor,
    a: KernelTensor | number,
    b: KernelTensor | number,
    out: KernelTensor,
  ): boolean {
    if (out.dtype !== 'f32' || cond.dtype !== 'f32') return false;
    if ((typeof a === 'number') === (typeof b === 'number')) return false;
    const tensor = (typeof a === 'number' ? b : a) as KernelTensor;
    if (tensor.dtype !== 'f32' || broadcastKind(tensor.shape, out.shape)?.kind !== 'same')
      return false;
    const kc = broadcastKind(cond.shape, out.shape);
    if (kc === null || kc.kind === 'perRow') return false;
    const n = shapeCount(out.shape);
    const cols = kc.kind === 'same' ? n : kc.period;
    const at = n === 0 ? null : this.memory.layout([cols, n, n]);
    if (at === null) return false;
    const [pc, px, po] = at as [number, number, number];
    this.memory.put(cond, pc);
    this.memory.put(tensor, px);
    const scalar = Math.fround((typeof a === 'number' ? a : b) as number);
    this.exports.where_rows!(pc, scalar, px, po, n / cols, cols, typeof a === 'number' ? 1 : 0);
    this.memory.take(out, po, n);
    return true;
  }

  /** Softmax over the last axis (kernels-wasm-rows.ts); false where it declines. */
  softmax(x: KernelTensor, out: KernelTensor, log: boolean): boolean {
    return softmaxWasm(this.memory, x, out, log);
  }

  /** Softmax's gradient over the last axis (kernels-wasm-rows.ts); false where it declines. */
  softmaxBackward(y: KernelTensor, dy: KernelTensor, dx: KernelTensor): boolean {
    return softmaxBackwardWasm(this.memory, y, dy, dx);
  }

  /** Attention's weights in one call (kernels-wasm-attention.ts); false where it declines. */
  scaledMaskedSoftmax(
    x: KernelTensor,
    mask: KernelTensor,
    scale: number,
    out: KernelTensor,
  ): boolean {
    return scaledMaskedSoftmaxWasm(this.memory, x, mask, scale, out);
  }

  /** Their gradient in one call (kernels-wasm-attention.ts); false where it declines. */
  scaledMaskedSoftmaxBackward(
    y: KernelTensor,
    dy: KernelTensor,
    mask: KernelTensor,
    scale: number,
    dx: KernelTensor,
  ): boolean {
    return scaledMaskedSoftmaxBackwardWasm(this.memory, y, dy, mask, scale, dx);
  }

  /** Sum or mean of x along `axis`; false for other ops and dtypes. */
  reduce(op: ReductionOp, x: KernelTensor, axis: number, out: KernelTensor): boolean {
    if ((op !== 'sum' && op !== 'mean') || x.dtype !== 'f32' || out.dtype !== 'f32') return false;
    const shape = x.shape;
    const outer = shapeCount(shape.slice(0, axis));
    const r = shape[axis]!;
    const inner = shapeCount(shape.slice(axis + 1));
    const n = outer * inner;
    const at = n === 0 || r === 0 ? null : this.memory.layout([outer * r * inner, n]);
    if (at === null) return false;
    const [px, po] = at as [number, number];
    this.memory.put(x, px);
    this.exports.sum_axis!(px, po, outer, r, inner, op === 'mean' ? 1 : 0);
    this.memory.take(out, po, n);
    return true;
  }

  /** Layer norm over the last axis (kernels-wasm-rows.ts); false where it declines. */
  layerNorm(
    x: KernelTensor,
    weight: KernelTensor | null,
    bias: KernelTensor | null,
    eps: number,
    out: KernelTensor,
    mean: KernelTensor,
    rstd: KernelTensor,
  ): boolean {
    return layerNormWasm(this.memory, x, weight, bias, eps, out, mean, rstd);
  }

  /** Layer norm's backward (kernels-wasm-rows.ts); false where it declines. */
  layerNormBackward(
    dy: KernelTensor,
    x: KernelTensor,
    weight: KernelTensor | null,
    mean: KernelTensor,
    rstd: KernelTensor,
    dx: KernelTensor,
    dWeight: KernelTensor | null,
    dBias: KernelTensor | null,
  ): boolean {
    return layerNormBackwardWasm(this.memory, dy, x, weight, mean, rstd, dx, dWeight, dBias);
  }

  /** The fused Adam/AdamW update in place; false unless all four tensors are f32. */
  adam(
    param: KernelTensor,
    grad: KernelTensor,
    expAvg: KernelTensor,
    expAvgSq: KernelTensor,
    hyper: AdamHyper,
  ): boolean {
    if (![param, grad, expAvg, expAvgSq].every((t) => t.dtype === 'f32')) return false;
    const n = shapeCount(param.shape);
    if (n === 0) return false;
    // Elementwise: in pieces when the four arrays would pass what the memory keeps.
    const piece = this.memory.piece(n, 4);
    if (piece < n) {
      for (let from = 0; from < n; from += piece) {
        const count = Math.min(piece, n - from);
        const part = (t: KernelTensor): KernelTensor => ({
          ...t,
          shape: [count],
          offset: t.offset + from,
        });
        if (!this.adam(part(param), part(grad), part(expAvg), part(expAvgSq), hyper)) return false;
      }
      return true;
    }
    const at = this.memory.layout([n, n, n, n]);
    if (at === null) return false;
    const [pp, pg, pm, pv] = at as [number, number, number, number];
    this.memory.put(param, pp);
    this.memory.put(grad, pg);
    this.memory.put(expAvg, pm);
    this.memory.put(expAvgSq, pv);
    const { lr, beta1, beta2, eps, weightDecay, step, decoupled, gradScale } = hyper;
    const mode = weightDecay === 0 ? 0 : decoupled ? 1 : 2;
    this.exports.adam!(
      pp,
      pg,
      pm,
      pv,
      n,
      gradScale,
      mode,
      weightDecay,
      1 - lr * weightDecay,
      beta1,
      1 - beta1,
      beta2,
      1 - beta2,
      lr / (1 - beta1 ** step),
      Math.sqrt(1 - beta2 ** step),
      eps,
    );
    this.memory.take(param, pp, n);
    this.memory.take(expAvg, pm, n);
    this.memory.take(expAvgSq, pv, n);
    return true;
  }
}

function isF32(t: KernelTensor | number): boolean {
  return typeof t === 'number' || t.dtype === 'f32';
}

let compiled: WeakMap<WasmApi, WebAssembly.Module | null> | undefined;

/**
 * An instance of the WASM SIMD kernels, or null where the engine cannot run them (no WebAssembly,
 * or no SIMD: `validate` rejects the module).
 */
export function loadWasmKernels(
  wasm: WasmApi | null = globalThis.WebAssembly ?? null,
  keepBytes = KEEP_BYTES,
): WasmKernels | null {
  if (wasm === null) return null;
  compiled ??= new WeakMap();
  let module = compiled.get(wasm);
  if (module === undefined) {
    const bytes = Uint8Array.from(atob(kernelsWasmBase64), (c) => c.charCodeAt(0));
    module = wasm.validate(bytes) ? new wasm.Module(bytes) : null;
    compiled.set(wasm, module);
  }
  if (module === null) return null;
  const instantiate = () => new wasm.Instance(module, {}).exports as unknown as Exports;
  return new WasmKernels(instantiate(), instantiate, keepBytes);
}
