/** The two vectors DiLoCo keeps between syncs: the global copy and the outer momentum. */
export type OuterStateName = 'global' | 'momentum';

/** Writes to one vector of a store that land together at `close` (one pass of an outer step). */
export interface OuterStateWriter {
  /** Puts `values` at element `offset` (f32 elements, not bytes). */
  write(offset: number, values: Float32Array): Promise<void>;
  /** Every write of this writer lands; reads after it see them. */
  close(): Promise<void>;
}

/**
 * Where DiLoCo keeps its global copy and outer momentum between syncs, outside the process's
 * memory: a browser tab's origin private file system (the trainer's `#platform`), or anything with
 * these three methods ([Note: the outer state in a store]). Elements are f32, exact: the store
 * keeps the bits it was given.
 */
export interface OuterStateStore {
  /** Where the vectors live, in words (for a run's lines): `origin private file system`. */
  readonly where: string;
  /** Elements DiLoCo reads or writes at a time (default `STORE_CHUNK`, 4 MiB of f32). */
  readonly chunkElements?: number;
  /** `length` elements of `name` from element `offset` (elements never written read as 0). */
  read(name: OuterStateName, offset: number, length: number): Promise<Float32Array>;
  /** A writer for `name`; reads see its writes once it is closed. */
  writer(name: OuterStateName): Promise<OuterStateWriter>;
}

/**
 * A store in this process's memory, for tests and as the reference a real store is checked
 * against: it holds the bytes it was given and counts them (`bytes`).
 */
export class MemoryOuterStateStore implements OuterStateStore {
  readonly where = 'memory (a test store)';
  private readonly vectors = new Map<OuterStateName, Float32Array>();

  /** `chunkElements`: how many elements DiLoCo moves at a time (small ones test the seams). */
  constructor(readonly chunkElements?: number) {}

  /** Bytes held over both vectors. */
  get bytes(): number {
    let sum = 0;
    for (const vector of this.vectors.values()) sum += vector.byteLength;
    return sum;
  }

  async read(name: OuterStateName, offset: number, length: number): Promise<Float32Array> {
    const out = new Float32Array(length);
    const vector = this.vectors.get(name);
    if (vector !== undefined)
      out.set(vector.subarray(offset, Math.min(offset + length, vector.length)));
    return out;
  }

  async writer(name: OuterStateName): Promise<OuterStateWriter> {
    const pending: { offset: number; values: Float32Array }[] = [];
    return {
      write: async (offset, values) => {
        pending.push({ offset, values: values.slice() });
      },
      close: async () => {
        const end = Math.max(0, ...pending.map((p) => p.offset + p.values.length));
        let vector = this.vectors.get(name) ?? new Float32Array(0);
        if (vector.length < end) {
          const grown = new Float32Array(end);
          grown.set(vector);
          vector = grown;
        }
        for (const { offset, values } of pending) vector.set(values, offset);
        this.vectors.set(name, vector);
      },
    };
  }
}
