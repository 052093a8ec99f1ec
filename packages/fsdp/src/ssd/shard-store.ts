import { FsdpStorageError } from '../errors.js';

/** The `ssdOffload` option: where shards and optimizer state live between uses. */
export interface SsdOffloadOptions {
  readonly store: ShardStore;
  /**
   * Also keep each unit's reduced gradient shard in the store between the end of backward and the
   * step (fairscale's ssd_offload keeps only parameters there), so gradients hold no memory either.
   * Default false: measured, it made every step slower (1 MiB more I/O a step and rank in the
   * bench) for a lower peak during the step only (packages/fsdp/README.md, benchmark). See
   * [Note: gradients in a store].
   */
  readonly offloadGradients?: boolean;
  /**
   * Where FSDP prefetches a unit (`limitAllGathers`, its shard read and its gather issued), also
   * start reading the shard of the unit after it in the background. Default false (measured:
   * packages/fsdp/README.md, benchmark). See [Note: prefetching shards from a store].
   */
  readonly readAhead?: boolean;
}

/** Bytes a store moved since it was made (or since `resetStats`). */
export interface ShardStoreStats {
  readonly bytesRead: number;
  readonly bytesWritten: number;
  readonly reads: number;
  readonly writes: number;
}

/**
 * [Note: shard stores]
 * Where `ssdOffload` keeps a unit's shards between uses: a flat namespace of keys, each holding
 * one byte string written whole and read whole. `read` fills a buffer the caller sized, and a
 * stored value of another length is a `FsdpStorageError` naming the file, never a short or long
 * read; a missing key is one too. `write` replaces the value whole: a reader sees the old bytes or
 * the new ones (files written to a temporary name and renamed over the old one). Each store counts
 * the bytes it moved, which is what a step costs in I/O. Two implementations: Node's file system
 * (`NodeFileStore`, with synchronous reads and writes too) and, in a page's worker, the Origin
 * Private File System (`OpfsStore`, asynchronous only: its files open asynchronously).
 */
export interface ShardStore {
  /** What the store is, for messages: `node-file`, `opfs`. */
  readonly kind: string;
  /** Replace `key`'s bytes with `bytes`. */
  write(key: string, bytes: Uint8Array): Promise<void>;
  /** Fill `into` with `key`'s bytes; a value of another length or a missing key is an error. */
  read(key: string, into: Uint8Array): Promise<void>;
  /**
   * `read` that completes before it returns, where the store can (Node's files): what lets an
   * unchanged `optimizer.step()` and `optimizer.stateDict()` read shards and state ([Note: the
   * optimizer's own step through a store]). A store without it needs `stepOffloaded`.
   */
  readSync?(key: string, into: Uint8Array): void;
  /** `write` that completes before it returns, where the store can (see `readSync`). */
  writeSync?(key: string, bytes: Uint8Array): void;
  /** Forget `key` (no error when it is absent). */
  remove(key: string): Promise<void>;
  /** Bytes and calls so far. */
  stats(): ShardStoreStats;
  /** Start counting from zero. */
  resetStats(): void;
}

const KEY = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$/;

/**
 * Throw a `FsdpStorageError` unless `key` is a plain file name (letters, digits, `_`, `.`, `-`, not
 * starting with `.` or `-`, at most 200 characters): keys never name directories.
 */
export function checkShardKey(op: string, key: string): void {
  if (!KEY.test(key)) {
    throw new FsdpStorageError(
      op,
      key,
      'a shard key is a plain file name (letters, digits, _ . -, not starting with . or -, at most 200 characters)',
    );
  }
}

/** A counter of the bytes a store moved, for `stats()` and `resetStats()`. */
export class StoreCounter {
  private counts = { bytesRead: 0, bytesWritten: 0, reads: 0, writes: 0 };

  read(bytes: number): void {
    this.counts.bytesRead += bytes;
    this.counts.reads++;
  }

  wrote(bytes: number): void {
    this.counts.bytesWritten += bytes;
    this.counts.writes++;
  }

  snapshot(): ShardStoreStats {
    return { ...this.counts };
  }

  reset(): void {
    this.counts = { bytesRead: 0, bytesWritten: 0, reads: 0, writes: 0 };
  }
}
