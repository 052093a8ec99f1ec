import type { RawStorage } from '../backend.js';
import type { CpuStorage } from './cpu-storage.js';

/**
 * The CPU backend's storage over memory the caller owns (`wrapExternal`: `tensorFromHostArray`
 * in external.ts): which storages are external, the bytes they hold now and at the peak, and
 * what to call when each is released. Never pooled; `charge` puts the bytes under the
 * allocator's emulated limit as any block is ([Note: the limit covers external memory]).
 */
export class ExternalStorage {
  private readonly entries = new WeakMap<RawStorage, { bytes: number; onRelease?: () => void }>();
  /** Bytes wrapped now. */
  bytes = 0;
  /** Highest `bytes` since creation or the last `resetPeak`. */
  peakBytes = 0;

  constructor(private readonly charge: (bytes: number) => void) {}

  /** Storage over `byteSize` bytes from the start of `buffer`, `ownedBytes` of them counted. */
  wrap(
    buffer: ArrayBufferLike,
    byteSize: number,
    ownedBytes: number,
    onRelease?: () => void,
  ): RawStorage {
    this.charge(ownedBytes);
    const raw: CpuStorage = { buffer: buffer as ArrayBuffer, byteSize };
    this.entries.set(raw, { bytes: ownedBytes, onRelease });
    this.bytes += ownedBytes;
    this.peakBytes = Math.max(this.peakBytes, this.bytes);
    return raw;
  }

  /** Ends the accounting of `storage` if it is external (true), else false: the pool's. */
  release(storage: RawStorage): boolean {
    const entry = this.entries.get(storage);
    if (entry === undefined) return false;
    this.entries.delete(storage);
    this.bytes -= entry.bytes;
    this.charge(-entry.bytes);
    entry.onRelease?.();
    return true;
  }

  resetPeak(): void {
    this.peakBytes = this.bytes;
  }
}
