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
   * `tensorFromHostArray`): never pooled, not under the limit. Absent on backends without it.
   */
  externalBytes?: number;
  /** Highest `externalBytes` since creation or the last `resetPeak`. */
  peakExternalBytes?: number;
}

/** How a backend creates and destroys its raw buffers; the allocator does the rest. */
export interface BufferFactory<B> {
  create(byteSize: number): B;
  destroy(buffer: B): void;
}

/** One block from the allocator. `byteSize` is the rounded size class. */
export interface Block<B> {
  readonly buffer: B;
  readonly byteSize: number;
}

const MIN_BLOCK = 256;
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
 */
export class CachingAllocator<B> {
  private readonly pools = new Map<number, B[]>();
  private allocated = 0;
  private reserved = 0;
  private peakAllocated = 0;
  private peakReserved = 0;
  private allocations = 0;
  private poolHits = 0;
  private limit: number | undefined;

  constructor(
    private readonly factory: BufferFactory<B>,
    private readonly deviceName = 'device',
  ) {}

  allocate(byteSize: number): Block<B> {
    const size = sizeClass(byteSize);
    if (this.limit !== undefined && this.allocated + size > this.limit) {
      throw new OutOfMemoryError(size, this.allocated, this.limit, this.deviceName);
    }
    const pool = this.pools.get(size);
    let buffer = pool?.pop();
    if (buffer !== undefined) {
      this.poolHits++;
    } else {
      if (this.limit !== undefined && this.reserved + size > this.limit) this.emptyCache();
      buffer = this.factory.create(size);
      this.reserved += size;
    }
    this.allocated += size;
    this.allocations++;
    this.peakAllocated = Math.max(this.peakAllocated, this.allocated);
    this.peakReserved = Math.max(this.peakReserved, this.reserved);
    return { buffer, byteSize: size };
  }

  release(block: Block<B>): void {
    this.allocated -= block.byteSize;
    this.allocations--;
    let pool = this.pools.get(block.byteSize);
    if (!pool) {
      pool = [];
      this.pools.set(block.byteSize, pool);
    }
    pool.push(block.buffer);
  }

  emptyCache(): void {
    for (const [size, pool] of this.pools) {
      for (const buffer of pool) {
        this.factory.destroy(buffer);
        this.reserved -= size;
      }
    }
    this.pools.clear();
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
