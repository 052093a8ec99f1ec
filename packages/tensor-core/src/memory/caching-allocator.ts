import { OutOfMemoryError } from '../errors.js';

/** Memory accounting, in bytes, as `torch.cuda.memory_stats` reports it. */
export interface MemoryStats {
  /** Bytes in storage handed out and not yet released (size-class rounded). */
  allocated: number;
  /** Bytes obtained from the device: allocated plus pooled. */
  reserved: number;
  /** Highest `allocated` since creation or the last `resetPeak`. */
  peakAllocated: number;
  /** Highest `reserved` since creation or the last `resetPeak`. */
  peakReserved: number;
  /** Live allocations. */
  allocations: number;
  /** Allocations served from the pool. */
  poolHits: number;
  /** The emulated limit, if one is set. */
  limit: number | undefined;
  /**
   * Bytes of memory the backend computes on but does not own (tensors over a caller's buffers,
   * `tensorFromHostArray`): never pooled, under the limit beside `allocated` ([Note: the limit
   * covers external memory]). Absent on backends without it.
   */
  externalBytes?: number;
  /** Highest `externalBytes` since creation or the last `resetPeak`. */
  peakExternalBytes?: number;
  /**
   * Bytes of host memory the backend's kernels keep for reuse outside the allocator (the CPU
   * backend's WebAssembly memories, which grow to the largest call's operands and never shrink).
   * Absent on backends without it.
   */
  scratchBytes?: number;
}

/**
 * How a backend creates and destroys its raw buffers; the allocator does the rest. `usage` is the
 * kind of buffer asked for (`allocate`'s second argument): `'storage'` for tensors, others where a
 * backend needs buffers that tensors cannot use (WebGPU's MAP_READ staging buffers).
 */
export interface BufferFactory<B> {
  create(byteSize: number, usage: string): B;
  destroy(buffer: B): void;
}

/** One block from the allocator. `byteSize` is the rounded size class. */
export interface Block<B> {
  readonly buffer: B;
  readonly byteSize: number;
  /** The kind of buffer (`allocate`'s `usage`); blocks go back to the pool of their kind. */
  readonly usage?: string;
}

const MIN_BLOCK = 256;
const STORAGE = 'storage';

function poolKey(usage: string, size: number): string {
  return `${usage}:${size}`;
}
const LARGE = 1 << 20;
const LARGE_ROUND = 2 << 20;

/**
 * Size classes: powers of two from 256 B to 1 MiB, then multiples of 2 MiB. Small blocks are
 * plentiful and short-lived (activations), so a power of two keeps the pool small; large ones (flat
 * parameters, gradients) waste at most 2 MiB each.
 */
export function sizeClass(byteSize: number): number {
  if (byteSize <= MIN_BLOCK) return MIN_BLOCK;
  if (byteSize <= LARGE) return 2 ** Math.ceil(Math.log2(byteSize));
  return Math.ceil(byteSize / LARGE_ROUND) * LARGE_ROUND;
}

/**
 * [Note: the caching allocator]
 *
 * Creating device buffers is slow (a GPUBuffer on Dawn, a zeroed 16 MiB ArrayBuffer takes ~1.7 ms),
 * and training allocates the same sizes every step. Released blocks go to a free list per size
 * class and are reused. The limit applies to `allocated`, as a real device's memory would: when an
 * allocation would pass it, the pool is emptied first (its memory counts against the device) and
 * the allocation throws `OutOfMemoryError` if `allocated` alone would still pass it.
 *
 * [Note: a bounded pool]
 * With `maxPooledBytes` the pools keep at most that many bytes: a block released past it is
 * destroyed instead. The pools hold one list per size class, so a pool without a bound keeps the
 * largest number of blocks each class ever had live at once, even while other classes are in use:
 * training GPT-2 (124M) on the CPU backend the pool held 1.0 GB beside a 1.8 GB peak of allocated
 * bytes (2.8 GB reserved), most of it in blocks of 150-200 MiB (the logits and their gradients,
 * the token embedding's gradient) that are each live for a part of the step. The CPU backend
 * bounds its pool at 256 MiB, and past that keeps a released block only while what it holds in all
 * (reserved) is at most 1.25x the peak of allocated bytes (`reserveOverPeak`): a process never
 * holds much more than its step needed at once. A new ArrayBuffer's pages are zeroed as they are
 * first touched, and that is not free: on the 2-core VM of issue 49 a fresh 154 MB buffer took
 * 55 ms to fill against 6 ms for one filled before (page faults), and with the pool at 256 MiB
 * alone the GPT-2 step spent some 1.8 s a step copying results into fresh buffers (the CPU
 * profile's `take` in wasm-memory.ts). With 1.25x of the peak: GPT-2's step 10.4-12.7 s against
 * 12.6-15.6 (two runs of 3 steps each, the first steps left out, 2026-11-28), reserved 3926 MiB
 * against 3380 for a peak of 3188 allocated.
 * A destroyed buffer is freed by the garbage collector, which V8 runs as such buffers are
 * allocated. WebGPU keeps the unbounded pool (creating GPU buffers is slow, and destroying one is
 * immediate).
 *
 * Buffers of another kind than tensor storage (`usage`, such as WebGPU's MAP_READ staging buffers
 * for reads) come from the same allocator in their own pools: every device byte is in `allocated`,
 * `reserved` and their peaks, and under the limit, whatever it is for.
 *
 * [Note: the limit covers external memory]
 * A backend may compute on memory it did not allocate (the CPU backend's `wrapExternal`: FSDP's
 * flat buffers in a group's registered memory, [Note: flat buffers in registered memory] in
 * fsdp). That memory is the device's as much as a block is, so it counts against the emulated
 * limit (`chargeOutside`) though not in `allocated` or its peak (the backend reports it as
 * `externalBytes`): FSDP over `shm` under `--memory-limit` is refused by the same
 * `OutOfMemoryError` as in-allocator memory, its message giving the external share. Before this,
 * a GPT-2 small run on 4 `shm` ranks under a 2.79 GiB limit held 1.57 GiB in the allocator and
 * 0.80 GiB of registered memory a rank uncounted.
 */
export class CachingAllocator<B> {
  private readonly pools = new Map<string, B[]>();
  private allocated = 0;
  private reserved = 0;
  private peakAllocated = 0;
  private peakReserved = 0;
  private allocations = 0;
  private poolHits = 0;
  private limit: number | undefined;

  /** Bytes in the pools (released blocks kept for reuse). */
  private pooled = 0;

  /** Bytes the backend computes on outside its blocks, under the limit too (`chargeOutside`). */
  private outside = 0;

  /**
   * `maxPooledBytes`: what the pools keep whatever the peak (default: no bound);
   * `reserveOverPeak`: past it, a released block is still kept while the reserved bytes are at
   * most this many times the peak of allocated bytes (default 0: never). See [Note: a bounded
   * pool].
   */
  constructor(
    private readonly factory: BufferFactory<B>,
    private readonly deviceName = 'device',
    private readonly maxPooledBytes = Number.POSITIVE_INFINITY,
    private readonly reserveOverPeak = 0,
  ) {}

  /** A block of at least `byteSize` bytes of kind `usage` (default `'storage'`). */
  allocate(byteSize: number, usage = STORAGE): Block<B> {
    const size = sizeClass(byteSize);
    if (this.limit !== undefined && this.allocated + this.outside + size > this.limit) {
      throw this.outOfMemory(size);
    }
    const key = poolKey(usage, size);
    const pool = this.pools.get(key);
    let buffer = pool?.pop();
    if (buffer !== undefined) {
      this.poolHits++;
      this.pooled -= size;
    } else {
      if (this.limit !== undefined && this.reserved + size > this.limit) this.emptyCache();
      buffer = this.factory.create(size, usage);
      this.reserved += size;
    }
    this.allocated += size;
    this.allocations++;
    this.peakAllocated = Math.max(this.peakAllocated, this.allocated);
    this.peakReserved = Math.max(this.peakReserved, this.reserved);
    return usage === STORAGE ? { buffer, byteSize: size } : { buffer, byteSize: size, usage };
  }

  release(block: Block<B>): void {
    this.allocated -= block.byteSize;
    this.allocations--;
    if (
      this.pooled + block.byteSize > this.maxPooledBytes &&
      this.reserved > this.peakAllocated * this.reserveOverPeak
    ) {
      // [Note: a bounded pool]
      this.factory.destroy(block.buffer);
      this.reserved -= block.byteSize;
      return;
    }
    this.pooled += block.byteSize;
    const key = poolKey(block.usage ?? STORAGE, block.byteSize);
    let pool = this.pools.get(key);
    if (!pool) {
      pool = [];
      this.pools.set(key, pool);
    }
    pool.push(block.buffer);
  }

  emptyCache(): void {
    for (const [key, pool] of this.pools) {
      const size = Number(key.slice(key.lastIndexOf(':') + 1));
      for (const buffer of pool) {
        this.factory.destroy(buffer);
        this.reserved -= size;
      }
    }
    this.pools.clear();
    this.pooled = 0;
  }

  /**
   * Counts `bytes` of memory the backend computes on but did not allocate (tensors over a
   * caller's buffers, such as the registered memory FSDP's flat buffers live in) against the
   * limit, beside `allocated`: see [Note: the limit covers external memory]. Throws
   * `OutOfMemoryError` (nothing counted) when they would pass it; `bytes` below 0 gives back.
   */
  chargeOutside(bytes: number): void {
    if (
      bytes > 0 &&
      this.limit !== undefined &&
      this.allocated + this.outside + bytes > this.limit
    ) {
      throw this.outOfMemory(bytes);
    }
    this.outside += bytes;
  }

  private outOfMemory(requested: number): OutOfMemoryError {
    return new OutOfMemoryError(
      requested,
      this.allocated,
      this.limit!,
      this.deviceName,
      this.outside,
    );
  }

  setLimit(bytes: number | undefined): void {
    this.limit = bytes;
  }

  stats(): MemoryStats {
    return {
      allocated: this.allocated,
      reserved: this.reserved,
      peakAllocated: this.peakAllocated,
      peakReserved: this.peakReserved,
      allocations: this.allocations,
      poolHits: this.poolHits,
      limit: this.limit,
    };
  }

  resetPeak(): void {
    this.peakAllocated = this.allocated;
    this.peakReserved = this.reserved;
  }
}
