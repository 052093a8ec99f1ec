import { ArgumentError } from '@webshard/tensor-core';
import { reduceSharedWasmBase64, reduceWasmBase64 } from './reduce-wasm.generated.js';

/** The elementwise reductions of `allReduce` and `reduceScatter`. `avg` is a sum scaled by 1/size. */
export type ReduceOp = 'sum' | 'avg' | 'max' | 'min' | 'product';

export const REDUCE_OPS: readonly ReduceOp[] = ['sum', 'avg', 'max', 'min', 'product'];

interface KernelExports {
  readonly scale_f32: (dst: number, n: number, factor: number) => void;
  readonly zero: (dst: number, bytes: number) => void;
  readonly [kernel: string]: unknown;
}

interface ReduceExports extends KernelExports {
  readonly memory: WebAssembly.Memory;
}

type Kernel = (dst: number, src: number, n: number) => void;
type KernelTo = (dst: number, a: number, src: number, n: number) => void;

let compiled: WebAssembly.Module | null = null;
let compiledShared: WebAssembly.Module | null = null;

function decodeBase64(text: string): Uint8Array<ArrayBuffer> {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function wasmModule(): WebAssembly.Module {
  compiled ??= new WebAssembly.Module(decodeBase64(reduceWasmBase64));
  return compiled;
}

function kernelName(op: ReduceOp, dtype: 'f32' | 'i32'): string {
  return `${op === 'avg' ? 'sum' : op}_${dtype}`;
}

/** The reduction kernels at byte offsets into one WASM memory (4-byte aligned elements). */
export interface ReduceKernels {
  /** `dst[i] = dst[i] op src[i]` for `n` elements. */
  reduce(op: ReduceOp, dtype: 'f32' | 'i32', dst: number, src: number, n: number): void;
  /** `dst[i] = a[i] op src[i]` for `n` elements; `dst` may be `src` or `a`. */
  reduceTo(
    op: ReduceOp,
    dtype: 'f32' | 'i32',
    dst: number,
    a: number,
    src: number,
    n: number,
  ): void;
  /** `dst[i] *= factor` for `n` f32 elements. */
  scale(dst: number, n: number, factor: number): void;
  /** `bytes` bytes from `dst` set to 0 ([Note: zeroing shared memory]). */
  zero(dst: number, bytes: number): void;
}

/** `ReduceKernels` over one instance of the kernels' module. */
class KernelSet implements ReduceKernels {
  constructor(private readonly exports: KernelExports) {}

  reduce(op: ReduceOp, dtype: 'f32' | 'i32', dst: number, src: number, n: number): void {
    if (n > 0) (this.exports[kernelName(op, dtype)] as Kernel)(dst, src, n);
  }

  reduceTo(
    op: ReduceOp,
    dtype: 'f32' | 'i32',
    dst: number,
    a: number,
    src: number,
    n: number,
  ): void {
    if (n > 0) (this.exports[`${kernelName(op, dtype)}_to`] as KernelTo)(dst, a, src, n);
  }

  scale(dst: number, n: number, factor: number): void {
    if (n > 0) this.exports.scale_f32(dst, n, factor);
  }

  /**
   * [Note: zeroing shared memory]
   * Registered memory is handed out zeroed ([Note: registered buffers] in
   * group/registered-buffers.ts), so an allocation that reuses freed memory is cleared first. From
   * JavaScript, `fill` on a view of shared memory stores one element at a time as a relaxed atomic:
   * on the 2-core development VM (Node 20) 460 us a MiB through a Uint8Array and 120-134 through a
   * Float32Array, against 26-30 for an ordinary ArrayBuffer's. WebAssembly's `memory.fill` on the
   * same shared memory is a memset (29 us a MiB), so the allocators clear through this kernel; in
   * FSDP's bench, which allocates every unit's gathered parameters and gradients each step from
   * registered memory, the clearing was 3.4 ms of a 96 ms step over tcp.
   */
  zero(dst: number, bytes: number): void {
    if (bytes > 0) this.exports.zero(dst, bytes);
  }
}

/**
 * The reduction kernels over a shared `WebAssembly.Memory` (`shared: true`) that several threads
 * map: the shm transport's arena, where each rank reduces its slice reading the other ranks' slots
 * in place, and a tcp group's registered memory. Offsets are byte offsets into that memory.
 */
export class SharedReducer extends KernelSet {
  constructor(readonly memory: WebAssembly.Memory) {
    compiledShared ??= new WebAssembly.Module(decodeBase64(reduceSharedWasmBase64));
    const instance = new WebAssembly.Instance(compiledShared, { env: { memory } });
    super(instance.exports as unknown as KernelExports);
  }
}

/**
 * A WASM memory that holds one process group's working data, with the SIMD kernels that reduce it
 * (src/kernels/reduce.wat). The collectives receive straight into regions of this memory and reduce
 * in place, so no data crosses between JS and WASM on the reduction path. The memory only grows, and
 * it is reused by every op of the group: no allocation per op or per segment once it is large
 * enough. Views must be taken after `ensure` (growing detaches the old ones).
 */
export class ReduceArena extends KernelSet {
  private readonly memory: WebAssembly.Memory;

  constructor() {
    const instance = new WebAssembly.Instance(wasmModule(), {});
    const exports = instance.exports as unknown as ReduceExports;
    super(exports);
    this.memory = exports.memory;
  }

  /** Grow the memory to at least `bytes`. */
  ensure(bytes: number): void {
    const memory = this.memory;
    const have = memory.buffer.byteLength;
    if (bytes <= have) return;
    memory.grow(Math.ceil((bytes - have) / 65536));
  }

  get buffer(): ArrayBuffer {
    return this.memory.buffer;
  }

  bytes(offset: number, length: number): Uint8Array {
    return new Uint8Array(this.memory.buffer, offset, length);
  }

  f32(offset: number, length: number): Float32Array {
    return new Float32Array(this.memory.buffer, offset, length);
  }

  i32(offset: number, length: number): Int32Array {
    return new Int32Array(this.memory.buffer, offset, length);
  }
}

/** Throws for reductions a dtype does not have (`avg` of integers is not defined). */
export function checkReduceOp(
  op: string,
  reduceOp: string,
  dtype: string,
): asserts reduceOp is ReduceOp {
  if (!(REDUCE_OPS as readonly string[]).includes(reduceOp)) {
    throw new ArgumentError(
      op,
      `unknown reduce op '${reduceOp}' (expected ${REDUCE_OPS.join(', ')})`,
    );
  }
  if (reduceOp === 'avg' && dtype === 'i32') {
    throw new ArgumentError(op, `reduce op 'avg' is not defined for i32; use 'sum' and divide`);
  }
}
