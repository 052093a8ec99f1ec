import type { CommDType, HostData } from './operand.js';

/** What a group's operand staging holds, in bytes of host memory (see `ProcessGroup.stagingStats`). */
export interface StagingStats {
  /** Host bytes held: arrays in use by the running op, waiting in a device queue, or pooled. */
  bytes: number;
  /** Highest `bytes` since the group was created. */
  peakBytes: number;
  /** Arrays held. */
  arrays: number;
  /** Operands served by an array the group already had. */
  reuses: number;
  /**
   * Collectives that copied an operand through the transport's staging (the shm arena's slots, the
   * ring's work area) instead of running on it in place; 0 while every operand is a registered
   * buffer where the transport has them (see [Note: registered buffers]).
   */
  stagedOps: number;
  /** Operand bytes those collectives copied into the staging and out of it (each way counted). */
  stagedBytes: number;
}

/**
 * [Note: operand staging]
 *
 * A tensor whose storage the host cannot view in place (a WebGPU tensor) is read into a host array
 * for the collective and written back from it. Each op used to allocate a fresh array of the whole
 * operand (and the backend copied it again when its queue was busy). A group keeps its host arrays
 * instead, pooled by byte size: the op reads the tensor into one (`Backend.read`'s `into`) and
 * lends it to the backend's `write` (`done`), so a busy device queue keeps the array itself rather
 * than a copy, and the array comes back when the write has run. A group runs one op at a time, so
 * every array an op took is free again once it settles (`recycle`), except one still lent. The
 * arrays are host memory, not the device's: they are counted in the group's `stagingStats()`, and
 * dropped by `close()`.
 */
export class OperandStaging {
  private readonly pools = new Map<number, ArrayBuffer[]>();
  private readonly inUse = new Set<ArrayBuffer>();
  private readonly lent = new Set<ArrayBuffer>();
  private bytes = 0;
  private peakBytes = 0;
  private arrays = 0;
  private reuses = 0;
  private stagedOps = 0;
  private stagedBytes = 0;
  private closed = false;

  /** A host array of `count` elements of `dtype` for the running op (contents undefined). */
  take(dtype: CommDType, count: number): HostData {
    const element = dtype === 'f16' || dtype === 'bf16' ? 2 : 4;
    const size = Math.ceil((count * element) / 4) * 4;
    let buffer = this.pools.get(size)?.pop();
    if (buffer !== undefined) {
      this.reuses++;
    } else {
      buffer = new ArrayBuffer(size);
      this.bytes += size;
      this.arrays++;
      this.peakBytes = Math.max(this.peakBytes, this.bytes);
    }
    this.inUse.add(buffer);
    if (element === 2) return new Uint16Array(buffer, 0, count);
    return dtype === 'i32' ? new Int32Array(buffer, 0, count) : new Float32Array(buffer, 0, count);
  }

  /** Lend `host` (one of ours) to a backend write: returns the `done` that gives it back. */
  lend(host: HostData): () => void {
    const buffer = host.buffer as ArrayBuffer;
    this.lent.add(buffer);
    return () => {
      this.lent.delete(buffer);
      if (!this.inUse.has(buffer)) this.giveBack(buffer);
    };
  }

  /** The running op settled: its arrays are free again, once no backend still holds them. */
  recycle(): void {
    for (const buffer of this.inUse) {
      this.inUse.delete(buffer);
      if (!this.lent.has(buffer)) this.giveBack(buffer);
    }
  }

  /** Drop every pooled array; arrays still in use are dropped when they come back. */
  clear(): void {
    this.closed = true;
    for (const [size, pool] of this.pools) {
      this.bytes -= size * pool.length;
      this.arrays -= pool.length;
    }
    this.pools.clear();
  }

  /** An op copied `bytes` of its operands through the transport's staging (none: in place). */
  staged(bytes: number): void {
    if (bytes === 0) return;
    this.stagedOps++;
    this.stagedBytes += bytes;
  }

  stats(): StagingStats {
    return {
      bytes: this.bytes,
      peakBytes: this.peakBytes,
      arrays: this.arrays,
      reuses: this.reuses,
      stagedOps: this.stagedOps,
      stagedBytes: this.stagedBytes,
    };
  }

  private giveBack(buffer: ArrayBuffer): void {
    if (this.closed) {
      this.bytes -= buffer.byteLength;
      this.arrays--;
      return;
    }
    let pool = this.pools.get(buffer.byteLength);
    if (pool === undefined) {
      pool = [];
      this.pools.set(buffer.byteLength, pool);
    }
    pool.push(buffer);
  }
}
