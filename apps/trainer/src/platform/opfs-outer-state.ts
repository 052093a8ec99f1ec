// A browser tab's store of DiLoCo's global copy and outer momentum ([Note: the outer state in a
// store] in @webshard/diloco), in the origin private file system: the tab's `#platform` gives it.
import type { OuterStateName, OuterStateStore, OuterStateWriter } from '@webshard/diloco';

/** Every file of this store's kind starts so (one store's files: the prefix, an id, the name). */
const PREFIX = 'webshard-outer-';

interface Writable {
  write(chunk: { type: 'write'; position: number; data: ArrayBufferView }): Promise<void>;
  close(): Promise<void>;
}
interface FileHandle {
  getFile(): Promise<Blob>;
  createWritable(options: { keepExistingData: boolean }): Promise<Writable>;
}
interface Directory {
  getFileHandle(name: string, options: { create: boolean }): Promise<FileHandle>;
  removeEntry(name: string): Promise<void>;
  keys(): AsyncIterable<string>;
}
interface Locks {
  request(name: string, hold: () => Promise<void>): Promise<void>;
  query(): Promise<{ held?: { name?: string }[] }>;
}

/**
 * The origin private file system's store, or null where the browser has none. Each store holds a
 * Web Lock named by its files while its page lives; files of the kind whose lock nobody holds (a
 * tab closed mid-run) are removed when a store is made, so a volunteer's disk does not fill with
 * the copies of runs that are over, and two tabs of one origin keep their own.
 */
export async function opfsOuterStateStore(): Promise<OuterStateStore | null> {
  const nav = (globalThis as { navigator?: { storage?: unknown; locks?: Locks } }).navigator;
  const storage = nav?.storage as { getDirectory?: () => Promise<Directory> } | undefined;
  if (typeof storage?.getDirectory !== 'function' || nav?.locks === undefined) return null;
  const locks = nav.locks;
  const root = await storage.getDirectory();
  const id = `${PREFIX}${Date.now().toString(36)}-${Math.floor(Math.random() * 2 ** 31).toString(36)}`;
  const held = new Promise<void>((ready) => {
    void locks.request(id, () => {
      ready();
      return new Promise<void>(() => {});
    });
  });
  await held;
  const live = new Set(((await locks.query()).held ?? []).map((lock) => lock.name));
  const stale: string[] = [];
  for await (const name of root.keys()) {
    const owner = name.slice(0, name.lastIndexOf('.'));
    if (name.startsWith(PREFIX) && !live.has(owner.slice(0, owner.lastIndexOf('-')))) {
      stale.push(name);
    }
  }
  for (const name of stale) await root.removeEntry(name).catch(() => {});
  const handles = new Map<OuterStateName, FileHandle>();
  const handle = async (name: OuterStateName) => {
    let found = handles.get(name);
    if (found === undefined) {
      found = await root.getFileHandle(`${id}-${name}.f32`, { create: true });
      handles.set(name, found);
    }
    return found;
  };
  return {
    where: 'origin private file system',
    async read(name, offset, length) {
      const file = await (await handle(name)).getFile();
      const bytes = await file.slice(offset * 4, (offset + length) * 4).arrayBuffer();
      const out = new Float32Array(length);
      out.set(new Float32Array(bytes, 0, bytes.byteLength / 4));
      return out;
    },
    async writer(name): Promise<OuterStateWriter> {
      // One writable a pass: the browser copies the file once for it, and its writes land at close.
      const writable = await (await handle(name)).createWritable({ keepExistingData: true });
      return {
        write: (offset, values) =>
          writable.write({ type: 'write', position: offset * 4, data: values }),
        close: () => writable.close(),
      };
    },
  };
}
