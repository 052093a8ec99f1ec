import { RegisteredMemoryError } from './errors.js';
import { type ReduceKernels, SharedReducer } from './kernels/reduce.js';
import { FreeLists } from './registered-memory.js';

/**
 * Bytes one segment spans in a registered address (`segment * SEGMENT_SPAN + offset`): 2 GiB, so
 * every byte offset inside a segment stays a non-negative i32 for the WASM kernels.
 */
export const SEGMENT_SPAN = 2 ** 31;
const PAGE = 65536;

/** The segment and byte offset of a registered address. */
export function splitAddress(address: number): { segment: number; offset: number } {
  const segment = Math.floor(address / SEGMENT_SPAN);
  return { segment, offset: address - segment * SEGMENT_SPAN };
}

/** One shared memory of registered buffers and the reduction kernels over it. */
export interface ArenaSegment extends ReduceKernels {
  /** The memory as it is now (a new object after it grew; earlier views stay valid). */
  readonly buffer: SharedArrayBuffer;
}

/** Where a segment keeps its allocator: the Int32 word of its next free 64-byte unit. */
export interface SegmentSource {
  readonly memory: WebAssembly.Memory;
  /** Int32 index of the segment's bump pointer (in 64-byte units) inside its own memory. */
  readonly word: number;
  /** Bytes the memory may grow to (its `maximum`), at most `SEGMENT_SPAN`. */
  readonly limit: number;
}

/** One segment as this thread sees it: kernels instantiated on first use. */
class SegmentView implements ArenaSegment {
  private kernels: ReduceKernels | null;
  private readonly seen = new WeakSet<ArrayBufferLike>();

  constructor(
    readonly source: SegmentSource,
    kernels: ReduceKernels | null,
  ) {
    this.kernels = kernels;
  }

  get buffer(): SharedArrayBuffer {
    const buffer = this.source.memory.buffer as unknown as SharedArrayBuffer;
    this.seen.add(buffer);
    return buffer;
  }

  owns(buffer: ArrayBufferLike): boolean {
    return this.seen.has(buffer) || buffer === this.buffer;
  }

  private get reducer(): ReduceKernels {
    this.kernels ??= new SharedReducer(this.source.memory);
    return this.kernels;
  }

  reduce(...args: Parameters<ReduceKernels['reduce']>): void {
    this.reducer.reduce(...args);
  }

  reduceTo(...args: Parameters<ReduceKernels['reduceTo']>): void {
    this.reducer.reduceTo(...args);
  }

  scale(dst: number, n: number, factor: number): void {
    this.reducer.scale(dst, n, factor);
  }

  zero(dst: number, bytes: number): void {
    this.reducer.zero(dst, bytes);
  }
}

/**
 * [Note: growing registered memory]
 * Registered buffers on the shm transport ([Note: registered buffers]) live in shared
 * `WebAssembly.Memory` segments that every rank maps: segment 0 is the collectives' arena itself
 * (after its slots), and the handle carries further segments, created empty (one 64 KiB page for
 * the allocator's word) with room for 2 GiB each. A segment is address space only until it is
 * allocated from: the ranks bump one shared pointer per segment (`Atomics.add`), and a segment
 * commits pages as its pointer passes them. An allocation that does not fit the current segment
 * marks it full and moves every later one, of any rank, to the next, so ranks
 * that allocate the same sizes in the same order, as FSDP's flat parameters and DDP's buckets do,
 * land in the same segment almost always. A collective runs in place when every rank's operand
 * lies in one segment, with that segment's kernels (offsets are i32 inside a segment); operands
 * in different segments take the copying schedule, the same bits a little slower. Freed
 * allocations go back to this rank's free lists and are handed to the next allocation of the same
 * size; WebAssembly memory cannot shrink (no `discard` has shipped), so pages once committed stay
 * with the world until it closes. The ceiling is the handle's `registeredBytes` (default 32 GiB of
 * address space, about 10 GiB reserved per segment by V8, none of it committed): past it, or when
 * the system refuses to commit a page, `allocate` throws `RegisteredMemoryError`, which says what
 * to do, as FSDP and DDP allocate their buffers before the first step.
 */
export class RegisteredSegments {
  private readonly views: SegmentView[];
  private readonly free = new FreeLists();
  /** The first segment that may still have room (a hint: the pointers are the truth). */
  private current = 0;

  /** `first`: segment 0's kernels when the caller has them already (the arena). */
  constructor(
    sources: readonly SegmentSource[],
    private readonly rank: number,
    private readonly limitBytes: number,
    first: ReduceKernels | null = null,
  ) {
    this.views = sources.map((source, i) => new SegmentView(source, i === 0 ? first : null));
  }

  /** Segments there are (used or not). */
  get count(): number {
    return this.views.length;
  }

  /** Segment `index`. */
  segment(index: number): ArenaSegment {
    const view = this.views[index];
    if (view === undefined) throw new RangeError(`[segment] no registered segment ${index}`);
    return view;
  }

  /** The segment whose memory `buffer` is, or -1. */
  segmentOf(buffer: ArrayBufferLike): number {
    if (!(buffer instanceof SharedArrayBuffer)) return -1;
    for (let i = 0; i < this.views.length; i++) if (this.views[i]!.owns(buffer)) return i;
    return -1;
  }

  /** Bytes committed in all segments (shared by every rank of the world). */
  committedBytes(): number {
    return this.views.reduce((sum, view) => sum + view.source.memory.buffer.byteLength, 0);
  }

  /**
   * `bytes` of zeroed registered memory (64-byte aligned); returns its address (`splitAddress`).
   * Fresh memory is zero already and is left untouched (its pages stay uncommitted until written).
   */
  allocate(bytes: number): number {
    const size = FreeLists.sizeOf(bytes);
    const reused = this.free.take(size);
    if (reused !== undefined) {
      const { segment, offset } = splitAddress(reused);
      this.views[segment]!.zero(offset, size); // [Note: zeroing shared memory]
      return reused;
    }
    if (size > SEGMENT_SPAN - PAGE) this.refuse(size, 'it is larger than one 2 GiB segment');
    for (let index = this.current; index < this.views.length; index++) {
      const offset = this.bump(index, size);
      if (offset >= 0) {
        this.current = index;
        return index * SEGMENT_SPAN + offset;
      }
    }
    this.current = this.views.length;
    this.refuse(
      size,
      `the world's ${this.limitBytes / 2 ** 30} GiB of registered memory are spent`,
    );
  }

  /** Returns an allocation for reuse by one of the same size. */
  release(address: number, bytes: number): void {
    this.free.put(address, FreeLists.sizeOf(bytes));
  }

  /** Bump segment `index`'s pointer by `size`; the offset, or -1 when it does not fit. */
  private bump(index: number, size: number): number {
    const { memory, word, limit } = this.views[index]!.source;
    const words = new Int32Array(memory.buffer, 0, word + 1);
    const full = limit / 64;
    if (Atomics.load(words, word) + size / 64 > full) {
      // Full for every rank from now on: later allocations of the other ranks follow this one.
      Atomics.store(words, word, full);
      return -1;
    }
    const offset = Atomics.add(words, word, size / 64) * 64;
    const end = offset + size;
    if (end > limit) {
      Atomics.store(words, word, full);
      return -1;
    }
    // Any rank may grow the memory; growing past what another rank already grew is harmless.
    while (memory.buffer.byteLength < end) {
      try {
        memory.grow(Math.ceil((end - memory.buffer.byteLength) / PAGE));
      } catch (error) {
        if (memory.buffer.byteLength >= end) break;
        this.refuse(size, `the system refused to commit it (${(error as Error).message})`);
      }
    }
    return offset;
  }

  private refuse(size: number, why: string): never {
    throw new RegisteredMemoryError(this.rank, size, this.committedBytes(), this.limitBytes, why);
  }
}
