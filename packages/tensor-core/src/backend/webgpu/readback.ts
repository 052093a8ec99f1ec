/// <reference types="@webgpu/types" />
import type { Block, CachingAllocator } from '../../memory/caching-allocator.js';
import type { DeviceQueue } from './device-queue.js';
import { MapMode } from './gpu-runtime.js';

/** Bytes of one staging buffer: a read of more goes through several, a piece at a time. */
export const READ_CHUNK_BYTES = 4 << 20;
/** Staging buffers one read keeps in flight (copying on the device while the host copies out). */
export const READ_CHUNKS_IN_FLIGHT = 3;
/** The allocator pool of MAP_READ staging buffers (see `BufferFactory`'s `usage`). */
export const READ_STAGING = 'read';
/** Bytes of the deferred-error flag that every read copies back in front of its data. */
const FLAG_BYTES = 16;

/**
 * [Note: chunked reads through pooled staging]
 *
 * A read copies the tensor's words into MAP_READ staging buffers, maps them and copies the bytes
 * into the host array. The staging buffers are ordinary blocks of the backend's caching allocator
 * (their own pool, `usage: 'read'`): counted in `allocated`, `reserved` and the peaks, refused with
 * `OutOfMemoryError` past the limit before anything is created, and back in the pool when the read
 * ends, instead of a private list that grew to the largest read (rounded up to a power of two) and
 * lived until `dispose`.
 *
 * A read of more than `READ_CHUNK_BYTES` goes in pieces of that size through at most
 * `READ_CHUNKS_IN_FLIGHT` staging buffers: the device copies the next pieces while the host copies
 * one out. Measured at 64 MiB on lavapipe and SwiftShader (tensor-core's bench), this is several
 * times faster than one staging buffer of the whole size (mapping a large buffer and copying out of
 * it are slow on both CPU drivers; 4 MiB pieces stay in cache), and a read needs at most 12 MiB of
 * staging whatever its size. The deferred-error flag travels in front of the first piece, so a
 * small read is still one copy and one map.
 *
 * A read still answers with the elements as they were when it was called (every kernel queued
 * before it, none after), although later pieces are copied later: a command that would write a
 * buffer a read still copies from (a kernel's output, a host write, a reuse of a released block)
 * first copies the rest of the read's range into a snapshot block on the device (`beforeWrite`),
 * and the read goes on from there. Only reads that meet such a write pay for the snapshot, and it
 * is counted and limited like any block. A buffer that the allocator would destroy while a read
 * copies from it is destroyed when the read ends.
 */
export class Readbacks {
  private readonly inFlight = new Set<Readback>();
  private readonly destroyAfterReads = new Set<GPUBuffer>();

  constructor(
    private readonly queue: DeviceQueue,
    private readonly allocator: CachingAllocator<GPUBuffer>,
    private readonly destroy: (buffer: GPUBuffer) => void,
  ) {}

  /**
   * Copy `bytes` bytes of `source` from byte `start` (both multiples of 4) into `out`, skipping
   * the first `skip` bytes of the range; resolves with the deferred-error flag (4 words) as it
   * was when the read was called.
   */
  async read(
    source: GPUBuffer,
    start: number,
    bytes: number,
    out: Uint8Array,
    skip: number,
  ): Promise<Uint32Array> {
    const read = new Readback(this.queue, this.allocator, source, start, bytes, out, skip);
    this.inFlight.add(read);
    try {
      return await read.run();
    } finally {
      this.inFlight.delete(read);
      for (const buffer of this.destroyAfterReads) {
        if (this.holds(buffer)) continue;
        this.destroyAfterReads.delete(buffer);
        this.destroy(buffer);
      }
    }
  }

  /** Call before enqueuing a command that writes `buffer`: reads copying from it snapshot first. */
  beforeWrite(buffer: GPUBuffer): void {
    if (this.inFlight.size === 0) return;
    for (const read of this.inFlight) if (read.copiesFrom(buffer)) read.snapshot();
  }

  /** Destroy `buffer` now, or when the last read that copies from it ends. */
  destroyWhenFree(buffer: GPUBuffer): void {
    if (this.holds(buffer)) this.destroyAfterReads.add(buffer);
    else this.destroy(buffer);
  }

  private holds(buffer: GPUBuffer): boolean {
    for (const read of this.inFlight) if (read.copiesFrom(buffer)) return true;
    return false;
  }
}

/** One read in flight: the stream `[flag][data]` in pieces of `READ_CHUNK_BYTES`. */
class Readback {
  private readonly total: number;
  private readonly pieces: number;
  private readonly slots: Block<GPUBuffer>[] = [];
  private readonly mapped: Promise<void>[] = [];
  /** Where data byte `x` of the range is now: `source` at `sourceOffset + x`. */
  private sourceOffset: number;
  private snapshotBlock: Block<GPUBuffer> | undefined;
  /** Pieces whose copies are enqueued. */
  private issued = 0;

  constructor(
    private readonly queue: DeviceQueue,
    private readonly allocator: CachingAllocator<GPUBuffer>,
    private source: GPUBuffer,
    start: number,
    private readonly bytes: number,
    private readonly out: Uint8Array,
    private readonly skip: number,
  ) {
    this.sourceOffset = start;
    this.total = FLAG_BYTES + bytes;
    this.pieces = Math.ceil(this.total / READ_CHUNK_BYTES);
  }

  copiesFrom(buffer: GPUBuffer): boolean {
    return this.issued < this.pieces && this.source === buffer;
  }

  /** Copy what is left of the range to a snapshot block, enqueued before the write that called. */
  snapshot(): void {
    const first = Math.max(this.issued * READ_CHUNK_BYTES - FLAG_BYTES, 0);
    const length = this.bytes - first;
    const block = this.allocator.allocate(length);
    this.queue.copy(this.source, this.sourceOffset + first, block.buffer, 0, length);
    this.snapshotBlock = block;
    this.source = block.buffer;
    this.sourceOffset = -first;
  }

  async run(): Promise<Uint32Array> {
    let flag = new Uint32Array(4);
    try {
      // Allocate every slot before enqueuing anything, so OutOfMemoryError leaves nothing behind.
      const slots = Math.min(this.pieces, READ_CHUNKS_IN_FLIGHT);
      for (let i = 0; i < slots; i++) {
        const length = Math.min(READ_CHUNK_BYTES, this.total - i * READ_CHUNK_BYTES);
        this.slots.push(this.allocator.allocate(length, READ_STAGING));
      }
      for (let i = 0; i < slots; i++) this.issue(i);
      await this.queue.flush();
      for (let i = 0; i < slots; i++) this.map(i);
      for (let i = 0; i < this.pieces; i++) {
        await this.mapped[i];
        const slot = this.slot(i);
        const from = i * READ_CHUNK_BYTES;
        const length = this.pieceLength(i);
        const range = slot.getMappedRange(0, length);
        if (i === 0) flag = new Uint32Array(range, 0, 4).slice();
        this.copyOut(new Uint8Array(range), from);
        slot.unmap();
        const next = i + READ_CHUNKS_IN_FLIGHT;
        if (next < this.pieces) {
          this.issue(next);
          await this.queue.flush();
          this.map(next);
        }
      }
      return flag;
    } finally {
      for (const slot of this.slots) {
        if (slot.buffer.mapState !== 'unmapped') slot.buffer.unmap();
        this.allocator.release(slot);
      }
      this.issued = this.pieces;
      if (this.snapshotBlock !== undefined) this.allocator.release(this.snapshotBlock);
    }
  }

  private slot(piece: number): GPUBuffer {
    return this.slots[piece % READ_CHUNKS_IN_FLIGHT]!.buffer;
  }

  private pieceLength(piece: number): number {
    return Math.min(READ_CHUNK_BYTES, this.total - piece * READ_CHUNK_BYTES);
  }

  /** Enqueue the copies of stream bytes `[piece * CHUNK, +length)` into the piece's slot. */
  private issue(piece: number): void {
    const slot = this.slot(piece);
    const from = piece * READ_CHUNK_BYTES;
    const length = this.pieceLength(piece);
    let at = 0;
    if (from === 0) {
      this.queue.copy(this.queue.errorFlag, 0, slot, 0, FLAG_BYTES);
      at = FLAG_BYTES;
    }
    const dataFrom = from + at - FLAG_BYTES;
    if (length > at) {
      this.queue.copy(this.source, this.sourceOffset + dataFrom, slot, at, length - at);
    }
    this.issued = piece + 1;
  }

  private map(piece: number): void {
    this.mapped[piece] = this.slot(piece).mapAsync(MapMode.READ, 0, this.pieceLength(piece));
    // A rejection is awaited (and thrown) in order; this only keeps it from being unhandled.
    this.mapped[piece].catch(() => {});
  }

  /** Copy the part of a piece (stream bytes from `from`) that lies in the wanted elements. */
  private copyOut(piece: Uint8Array, from: number): void {
    const wantFrom = FLAG_BYTES + this.skip;
    const wantTo = wantFrom + this.out.byteLength;
    const lo = Math.max(from, wantFrom);
    const hi = Math.min(from + piece.byteLength, wantTo);
    if (hi <= lo) return;
    this.out.set(piece.subarray(lo - from, hi - from), lo - wantFrom);
  }
}
