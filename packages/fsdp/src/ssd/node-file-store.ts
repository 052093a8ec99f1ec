import {
  closeSync,
  fstatSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readSync,
  renameSync,
  rmSync,
  writeSync,
} from 'node:fs';
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
      if (size !== into.byteLength) throw wrongSize(op, file, size, into.byteLength);
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

  /**
   * `write`, completed before it returns: a temporary file written, fsynced and renamed over the old
   * one, then the directory fsynced, as `write` does ([Note: shard stores]).
   */
  writeSync(key: string, bytes: Uint8Array): void {
    const op = 'NodeFileStore.writeSync';
    checkShardKey(op, key);
    const file = this.fileOf(key);
    const temporary = `${file}.${process.pid}.${temporaries++}.tmp`;
    try {
      if (!this.made) {
        mkdirSync(this.dir, { recursive: true });
        this.made = true;
      }
      const fd = openSync(temporary, 'w');
      try {
        let done = 0;
        while (done < bytes.byteLength) done += writeSync(fd, bytes, done, bytes.byteLength - done);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      renameSync(temporary, file);
      syncDirectorySync(this.dir);
    } catch (error) {
      rmSync(temporary, { force: true });
      throw new FsdpStorageError(op, file, describe(error), error);
    }
    this.counter.wrote(bytes.byteLength);
  }

  /** `read`, completed before it returns; the same checks. */
  readSync(key: string, into: Uint8Array): void {
    const op = 'NodeFileStore.readSync';
    checkShardKey(op, key);
    const file = this.fileOf(key);
    let fd: number;
    try {
      fd = openSync(file, 'r');
    } catch (error) {
      throw new FsdpStorageError(op, file, describe(error), error);
    }
    try {
      const { size } = fstatSync(fd);
      if (size !== into.byteLength) throw wrongSize(op, file, size, into.byteLength);
      let done = 0;
      while (done < size) {
        const n = readSync(fd, into, done, size - done, done);
        if (n === 0) throw new FsdpStorageError(op, file, `ended after ${done} of ${size} bytes`);
        done += n;
      }
    } catch (error) {
      if (error instanceof FsdpStorageError) throw error;
      throw new FsdpStorageError(op, file, describe(error), error);
    } finally {
      closeSync(fd);
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

let temporaries = 0;

function wrongSize(op: string, file: string, size: number, expected: number): FsdpStorageError {
  return new FsdpStorageError(
    op,
    file,
    `holds ${size} bytes, expected ${expected} (a shard of another model or world size, or a damaged file)`,
  );
}

/** fsync a directory so a rename in it is durable (nothing where directories cannot be opened). */
function syncDirectorySync(dir: string): void {
  let fd: number | null = null;
  try {
    fd = openSync(dir, 'r');
    fsyncSync(fd);
  } catch {
    // Some platforms (Windows) cannot fsync a directory; the rename is still atomic there.
  } finally {
    if (fd !== null) closeSync(fd);
  }
}

function describe(error: unknown): string {
  const code = (error as { code?: string }).code;
  if (code === 'ENOENT') return 'no such file (never written, or removed)';
  return error instanceof Error ? error.message : String(error);
}
