import { FsdpStorageError } from '../errors.js';
import {
  checkShardKey,
  type ShardStore,
  type ShardStoreStats,
  StoreCounter,
} from './shard-store.js';

/** The parts of the File System Access API this store uses (OPFS, in a dedicated worker). */
interface SyncAccessHandle {
  getSize(): number;
  read(into: Uint8Array, options: { at: number }): number;
  write(bytes: Uint8Array, options: { at: number }): number;
  truncate(size: number): void;
  flush(): void;
  close(): void;
}
interface FileHandle {
  createSyncAccessHandle(): Promise<SyncAccessHandle>;
  move(name: string): Promise<void>;
}
interface DirectoryHandle {
  getDirectoryHandle(name: string, options?: { create?: boolean }): Promise<DirectoryHandle>;
  getFileHandle(name: string, options?: { create?: boolean }): Promise<FileHandle>;
  removeEntry(name: string): Promise<void>;
}

let temporaries = 0;

/**
 * A `ShardStore` in the Origin Private File System of a page's origin, for a dedicated worker
 * (synchronous access handles exist only there): key `k` is the file `<dir>/k.shard`, written to a
 * temporary file, flushed and moved over the old one, and checked for its size before it is read
 * ([Note: shard stores]). `OpfsStore.open(dir)` makes the directory under the origin's root.
 */
export class OpfsStore implements ShardStore {
  readonly kind = 'opfs';
  readonly dir: string;
  private readonly handle: DirectoryHandle;
  private readonly counter = new StoreCounter();

  private constructor(dir: string, handle: DirectoryHandle) {
    this.dir = dir;
    this.handle = handle;
  }

  /** The store in directory `dir` of the origin's private file system (made when missing). */
  static async open(dir: string): Promise<OpfsStore> {
    checkShardKey('OpfsStore.open', dir);
    const storage = (globalThis as { navigator?: { storage?: { getDirectory?(): unknown } } })
      .navigator?.storage;
    if (typeof storage?.getDirectory !== 'function') {
      throw new FsdpStorageError(
        'OpfsStore.open',
        dir,
        'no Origin Private File System here (navigator.storage.getDirectory): use it in a page or worker, NodeFileStore in Node',
      );
    }
    const root = (await storage.getDirectory()) as DirectoryHandle;
    return new OpfsStore(dir, await root.getDirectoryHandle(dir, { create: true }));
  }

  /** The file that holds `key`, relative to the origin's root. */
  fileOf(key: string): string {
    return `${this.dir}/${key}.shard`;
  }

  async write(key: string, bytes: Uint8Array): Promise<void> {
    const op = 'OpfsStore.write';
    checkShardKey(op, key);
    const temporary = `${key}.${temporaries++}.tmp`;
    try {
      const file = await this.handle.getFileHandle(temporary, { create: true });
      const access = await file.createSyncAccessHandle();
      try {
        access.truncate(0);
        let done = 0;
        while (done < bytes.byteLength) done += access.write(bytes.subarray(done), { at: done });
        access.flush();
      } finally {
        access.close();
      }
      await file.move(`${key}.shard`);
    } catch (error) {
      await this.handle.removeEntry(temporary).catch(() => {});
      throw new FsdpStorageError(op, this.fileOf(key), describe(error), error);
    }
    this.counter.wrote(bytes.byteLength);
  }

  async read(key: string, into: Uint8Array): Promise<void> {
    const op = 'OpfsStore.read';
    checkShardKey(op, key);
    const name = this.fileOf(key);
    let access: SyncAccessHandle;
    try {
      const file = await this.handle.getFileHandle(`${key}.shard`);
      access = await file.createSyncAccessHandle();
    } catch (error) {
      throw new FsdpStorageError(op, name, describe(error), error);
    }
    try {
      const size = access.getSize();
      if (size !== into.byteLength) {
        throw new FsdpStorageError(
          op,
          name,
          `holds ${size} bytes, expected ${into.byteLength} (a shard of another model or world size, or a damaged file)`,
        );
      }
      let done = 0;
      while (done < size) {
        const n = access.read(into.subarray(done), { at: done });
        if (n === 0) throw new FsdpStorageError(op, name, `ended after ${done} of ${size} bytes`);
        done += n;
      }
    } finally {
      access.close();
    }
    this.counter.read(into.byteLength);
  }

  async remove(key: string): Promise<void> {
    checkShardKey('OpfsStore.remove', key);
    await this.handle.removeEntry(`${key}.shard`).catch((error: unknown) => {
      if ((error as { name?: string }).name !== 'NotFoundError') throw error;
    });
  }

  stats(): ShardStoreStats {
    return this.counter.snapshot();
  }

  resetStats(): void {
    this.counter.reset();
  }
}

function describe(error: unknown): string {
  const name = (error as { name?: string }).name;
  if (name === 'NotFoundError') return 'no such file (never written, or removed)';
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
