import { decodeBytes, encodeBytes } from './byte-huffman.js';
import { DilocoArgumentError } from './errors.js';
import type { JoinEntries } from './join-state.js';

/*
 * [Note: a join in planes]
 * `packJoinEntries` makes `encodeJoinState`'s entries smaller without changing a bit of what
 * `unpackJoinEntries` gives back, so the global copy stays exact ([Note: a compressed join]):
 * - each f32 entry (the global copy) is cut into two planes: its values' top bytes (sign and
 *   exponent) coded ([Note: a lossless code for a join's skewed bytes]) as `NAME.top`, and their 3
 *   lower bytes as they are (`NAME.low`, little endian, 3 bytes a value): the mantissa's bits are
 *   as good as random and no lossless code shrinks them;
 * - each i32 entry (the encoded momentum: int8 values and one f32 scale a block) is coded whole
 *   as bytes (`NAME.bytes`): quantized values near 0 are the common ones;
 * - every other entry (the meta) goes as it is.
 * `join.pack` (JSON) lists what was packed and how, so the unpacking needs nothing else. Every
 * step is deterministic, the same bytes on every member in Node or in a tab: members send slices
 * of one stream. What it saves is measured in the trainer's README ("What a join costs").
 */

const PACK = 'join.pack';

interface Packed {
  readonly name: string;
  readonly kind: 'f32' | 'i32';
  readonly length: number;
}

function bytesOf(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/** `entries` with their f32 and i32 arrays coded losslessly ([Note: a join in planes]). */
export function packJoinEntries(entries: JoinEntries): JoinEntries {
  if (entries.has(PACK)) {
    throw new DilocoArgumentError(
      { op: 'packJoinEntries', rank: -1 },
      'entries',
      'these entries are packed already',
    );
  }
  const out: JoinEntries = new Map();
  const packed: Packed[] = [];
  for (const [name, value] of entries) {
    if (value instanceof Float32Array) {
      const bytes = bytesOf(value);
      const n = value.length;
      const top = new Uint8Array(n);
      const low = new Uint8Array(3 * n);
      for (let i = 0, j = 0; i < n; i++, j += 3) {
        const k = 4 * i;
        low[j] = bytes[k]!;
        low[j + 1] = bytes[k + 1]!;
        low[j + 2] = bytes[k + 2]!;
        top[i] = bytes[k + 3]!;
      }
      out.set(`${name}.top`, encodeBytes(top));
      out.set(`${name}.low`, low);
      packed.push({ name, kind: 'f32', length: n });
    } else if (value instanceof Int32Array) {
      out.set(`${name}.bytes`, encodeBytes(bytesOf(value)));
      packed.push({ name, kind: 'i32', length: value.length });
    } else out.set(name, value);
  }
  out.set(PACK, new TextEncoder().encode(JSON.stringify(packed)));
  return out;
}

function missing(name: string): DilocoArgumentError {
  return new DilocoArgumentError(
    { op: 'unpackJoinEntries', rank: -1 },
    'entries',
    `${name} is missing or of the wrong length`,
  );
}

/**
 * The entries `packJoinEntries` was given, bit for bit; entries that were never packed (no
 * `join.pack`) are returned as they are.
 */
export function unpackJoinEntries(entries: ReadonlyMap<string, ArrayBufferView>): JoinEntries {
  const list = entries.get(PACK);
  const out: JoinEntries = new Map();
  const plain = (name: string, value: ArrayBufferView) => {
    if (
      value instanceof Float32Array ||
      value instanceof Int32Array ||
      value instanceof Uint8Array
    ) {
      out.set(name, value);
    } else out.set(name, bytesOf(value));
  };
  if (list === undefined) {
    for (const [name, value] of entries) plain(name, value);
    return out;
  }
  const packed = JSON.parse(new TextDecoder().decode(bytesOf(list))) as Packed[];
  const parts = new Set<string>([PACK]);
  for (const { name, kind, length } of packed) {
    if (kind === 'f32') {
      const coded = entries.get(`${name}.top`);
      const low = entries.get(`${name}.low`);
      if (coded === undefined || low === undefined || low.byteLength !== 3 * length) {
        throw missing(`${name}.top or ${name}.low`);
      }
      const top = decodeBytes(bytesOf(coded));
      if (top.length !== length) throw missing(`${name}.top`);
      const lows = bytesOf(low);
      const value = new Float32Array(length);
      const bytes = bytesOf(value);
      for (let i = 0, j = 0; i < length; i++, j += 3) {
        const k = 4 * i;
        bytes[k] = lows[j]!;
        bytes[k + 1] = lows[j + 1]!;
        bytes[k + 2] = lows[j + 2]!;
        bytes[k + 3] = top[i]!;
      }
      out.set(name, value);
      parts.add(`${name}.top`).add(`${name}.low`);
    } else {
      const coded = entries.get(`${name}.bytes`);
      if (coded === undefined) throw missing(`${name}.bytes`);
      const bytes = decodeBytes(bytesOf(coded));
      if (bytes.length !== 4 * length) throw missing(`${name}.bytes`);
      out.set(name, new Int32Array(bytes.buffer, bytes.byteOffset, length));
      parts.add(`${name}.bytes`);
    }
  }
  for (const [name, value] of entries) if (!parts.has(name)) plain(name, value);
  return out;
}
