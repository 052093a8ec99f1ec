import { mkdir, open, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFileAtomic } from '../checkpoint/atomic-write.js';
import { FsdpStorageError } from '../errors.js';
import {
  checkShardKey,
  type ShardStore,
  type ShardStoreStats,
  StoreCounter,
} from './shard-store.js';

/**
 * A `ShardStore` over a directory of Node's file system: key `k` is the file `<dir>/k.shard`,
 * written atomically (temporary file, fsync, rename) and checked for its size before it is read
 * ([Note: shard stores]). The directory is made on the first write.
 */
export class NodeFileStore implements ShardStore {
  readonly kind = 'node-file';
  readonly dir: string;
  private readonly counter = new StoreCounter();
  private made = false;

  constructor(dir: string) {
    this.dir = dir;
  }

  /** The file that holds `key`. */
  fileOf(key: string): string {
    return join(this.dir, `${key}.shard`);
  }

  async write(key: string, bytes: Uint8Array): Promise<void> {
    checkShardKey('NodeFileStore.write', key);
    const file = this.fileOf(key);
    try {
      if (!this.made) {
        await mkdir(this.dir, { recursive: true });
        this.made = true;
      }
      await writeFileAtomic(file, bytes);
    } catch (error) {
      throw new FsdpStorageError('NodeFileStore.write', file, describe(error), error);
    }
    this.counter.wrote(bytes.byteLength);
  }

  async read(key: string, into: Uint8Array): Promise<void> {
    const op = 'NodeFileStore.read';
    checkShardKey(op, key);
    const file = this.fileOf(key);
    let handle: Awaited<ReturnType<typeof open>>;
    try {
      handle = await open(file, 'r');
    } catch (error) {
      throw new FsdpStorageError(op, file, describe(error), error);
    }
    try {
      const { size } = await handle.stat();
      if (size !== into.byteLength) {
        throw new FsdpStorageError(
          op,
          file,
          `holds ${size} bytes, expected ${into.byteLength} (a shard of another model or world size, or a damaged file)`,
        );
      }
      let done = 0;
      while (done < size) {
        const { bytesRead } = await handle.read(into, done, size - done, done);
        if (bytesRead === 0) {
          throw new FsdpStorageError(op, file, `ended after ${done} of ${size} bytes`);
        }
        done += bytesRead;
      }
    } catch (error) {
      if (error instanceof FsdpStorageError) throw error;
      throw new FsdpStorageError(op, file, describe(error), error);
    } finally {
      await handle.close().catch(() => {});
    }
    this.counter.read(into.byteLength);
  }

  async remove(key: string): Promise<void> {
    checkShardKey('NodeFileStore.remove', key);
    await rm(this.fileOf(key), { force: true });
  }

  stats(): ShardStoreStats {
    return this.counter.snapshot();
  }

  resetStats(): void {
    this.counter.reset();
  }
}

function describe(error: unknown): string {
  const code = (error as { code?: string }).code;
  if (code === 'ENOENT') return 'no such file (never written, or removed)';
  return error instanceof Error ? error.message : String(error);
}
