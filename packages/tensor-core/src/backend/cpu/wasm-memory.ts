import type { KernelTensor } from '../backend.js';
import { readValues } from './cpu-storage.js';

/** What a kernels module instance exports: its functions and its memory. */
export type Exports = Record<string, (...args: number[]) => void> & { memory: WebAssembly.Memory };

const PAGE = 65536;
/** Operands start here; bytes below are the kernels' scratch vectors. */
const BASE = 64;
const MAX_BYTES = 2 ** 31 - 2 ** 16;
/**
 * [Note: the WASM kernels' memory]
 * A module's memory grows to the largest call's operands and cannot shrink. Kept, it made every
 * rank training GPT-2 (124M) hold the largest call's operands for good (the fused AdamW over the
 * token embedding: four arrays of 154 MB; a softmax over the logits: two of 206 MB) beside what
 * the allocator holds. So the elementwise calls (binary ops without broadcasting or with a
 * scalar, gelu and square, the fused Adam/AdamW) and the softmax (whole rows) run in pieces that
 * fit in `KEEP_BYTES` (64 MiB): every element or row is computed alone, so the bits are the same.
 * The others (broadcasting binary ops, where, sums along an axis, layer norm) take their operands
 * whole; once the memory is past `KEEP_BYTES`, the first call that fits in that runs on a fresh
 * instance, and the large memory is left to the garbage collector (V8
 * counts it as external memory and collects it as soon as allocation goes on). Consecutive large
 * calls still share one memory; the cost is growing a memory again, page by page, for the next
 * large call, whose copies touch those pages anyway.
 */
export const KEEP_BYTES = 64 * 2 ** 20;

/**
 * The memory of one kernels module instance (kernels-wasm.ts): operands laid out from `BASE`,
 * copied in and out, grown as calls need and renewed past `keepBytes`
 * ([Note: the WASM kernels' memory]).
 */
export class WasmMemory {
  private view: Float32Array;

  /**
   * `renew`: a fresh instance of the module, to let go of a memory grown past `keepBytes` (see
   * [Note: the WASM kernels' memory]); without it the memory is kept whatever its size.
   */
  constructor(
    private current: Exports,
    private readonly renew: (() => Exports) | null = null,
    private readonly keepBytes = KEEP_BYTES,
  ) {
    this.view = new Float32Array(current.memory.buffer);
  }

  /** The instance the kernels call (a new one after a renewal). */
  get exports(): Exports {
    return this.current;
  }

  /** Bytes of the module's memory: the operands of the largest call so far. */
  get scratchBytes(): number {
    return this.current.memory.buffer.byteLength;
  }

  /** Room for `bytes` of operands; false past what the module can address. */
  private reserve(bytes: number): boolean {
    const need = BASE + bytes;
    if (need > MAX_BYTES) return false;
    if (this.renew !== null && need <= this.keepBytes && this.scratchBytes > this.keepBytes) {
      // [Note: the WASM kernels' memory]
      this.current = this.renew();
      this.view = new Float32Array(this.current.memory.buffer);
    }
    const memory = this.current.memory;
    if (memory.buffer.byteLength < need) {
      try {
        memory.grow(Math.ceil((need - memory.buffer.byteLength) / PAGE));
      } catch {
        return false; // the engine would not grow it: the TypeScript kernel runs
      }
      this.view = new Float32Array(memory.buffer);
    }
    return true;
  }

  /** Lays out arrays of `lengths` floats from BASE, 16-byte aligned; their byte addresses. */
  layout(lengths: number[]): number[] | null {
    const at: number[] = [];
    let next = BASE;
    for (const length of lengths) {
      at.push(next);
      // One vector of padding past each array: f64x2 kernels may touch one element past the end.
      next += Math.ceil(length / 4) * 16 + 16;
    }
    return this.reserve(next - BASE) ? at : null;
  }

  put(t: KernelTensor, at: number): void {
    this.view.set(readValues(t) as Float32Array, at / 4);
  }

  take(out: KernelTensor, at: number, n: number, from = 0): void {
    (readValues(out) as Float32Array).set(this.view.subarray(at / 4, at / 4 + n), from);
  }

  /** Elements [from, from + count) of `t` to `at`. */
  putRange(t: KernelTensor, at: number, from: number, count: number): void {
    this.view.set((readValues(t) as Float32Array).subarray(from, from + count), at / 4);
  }

  /**
   * Elements per piece of a call over `n` elements in `arrays` arrays of them, whole `unit`s (a
   * row) at a time, so the operands fit in `keepBytes` ([Note: the WASM kernels' memory]).
   */
  piece(n: number, arrays: number, unit = 1): number {
    const fits = Math.floor((this.keepBytes - BASE - 32 * arrays) / (4 * arrays));
    return n <= fits ? n : Math.max(unit, Math.floor(fits / unit) * unit);
  }
}
