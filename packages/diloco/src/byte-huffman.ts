import { DilocoArgumentError } from './errors.js';

/*
 * [Note: a lossless code for a join's skewed bytes]
 * A join must move the global copy bit for bit ([Note: a compressed join]), but not every byte of
 * it carries 8 bits: the top byte of an f32 (its sign and 7 of its 8 exponent bits) takes a few
 * values only, since a model's weights span a few powers of two (3.5 bits of it were left after
 * deflate on N(0, 0.02) weights; its 3 lower bytes did not shrink at all, nor under deflate). So a
 * join's f32 entries travel as two planes ([Note: a join in planes] in join-pack.ts), the top
 * bytes through this code: an order-0 canonical Huffman code of one byte a symbol, which reaches
 * what deflate did on that plane (deflate's matches find nothing there) at a fraction of its time,
 * in plain JavaScript on every platform. It must be deterministic: every member sends a slice of
 * the same stream ([Note: a state in slices from several members] in @webshard/collectives), so
 * members in Node and in tabs must produce the same bytes, which a zlib build does not promise.
 * Code lengths are limited to 15 bits (counts halved until they fit, as zlib's own rebuilds do
 * not need to), so the decoder reads each symbol with one lookup in a table of 2^15 entries.
 * Format: the count of symbols (u32, little endian), a mode byte (0: the bytes as they are, where
 * the code would not be shorter; 1: coded), then for mode 1 the 256 code lengths (one byte each, 0
 * for an absent symbol) and the bits, most significant first, the last byte padded with zeros.
 */

const MAX_BITS = 15;
const HEADER = 5;

/** Huffman code lengths of `counts`, none above `MAX_BITS`. */
function codeLengths(counts: Float64Array): Uint8Array {
  const lengths = new Uint8Array(256);
  let scaled = Float64Array.from(counts);
  for (;;) {
    // A node: its weight, its lowest symbol (ties), its symbols.
    type Node = { weight: number; low: number; symbols: number[] };
    const nodes: Node[] = [];
    for (let s = 0; s < 256; s++) {
      if (scaled[s]! > 0) nodes.push({ weight: scaled[s]!, low: s, symbols: [s] });
    }
    lengths.fill(0);
    if (nodes.length === 1) {
      lengths[nodes[0]!.low] = 1;
      return lengths;
    }
    // At most 256 leaves: a sorted list merged from the front is fast enough and deterministic
    // (ties broken by the lowest symbol, so every platform builds the same code).
    const order = (a: Node, b: Node) => a.weight - b.weight || a.low - b.low;
    nodes.sort(order);
    while (nodes.length > 1) {
      const a = nodes.shift()!;
      const b = nodes.shift()!;
      const symbols = a.symbols.concat(b.symbols);
      for (const s of symbols) lengths[s]! += 1;
      const merged = { weight: a.weight + b.weight, low: Math.min(a.low, b.low), symbols };
      let at = 0;
      while (at < nodes.length && order(nodes[at]!, merged) <= 0) at++;
      nodes.splice(at, 0, merged);
    }
    if (Math.max(...lengths) <= MAX_BITS) return lengths;
    scaled = scaled.map((c) => (c > 0 ? Math.max(1, Math.floor(c / 2)) : 0));
  }
}

/** Canonical codes of `lengths`: shorter first, then by symbol (as deflate's). */
function canonicalCodes(lengths: Uint8Array): Uint32Array {
  const codes = new Uint32Array(256);
  const perLength = new Uint32Array(MAX_BITS + 1);
  for (const length of lengths) if (length > 0) perLength[length]! += 1;
  const next = new Uint32Array(MAX_BITS + 2);
  let code = 0;
  for (let bits = 1; bits <= MAX_BITS; bits++) {
    code = (code + perLength[bits - 1]!) << 1;
    next[bits] = code;
  }
  // perLength[0] counts nothing (absent symbols are skipped above), so the first code is 0.
  for (let s = 0; s < 256; s++) {
    const length = lengths[s]!;
    if (length > 0) codes[s] = next[length]!++;
  }
  return codes;
}

function header(n: number, mode: number, size: number): Uint8Array {
  const out = new Uint8Array(size);
  new DataView(out.buffer).setUint32(0, n, true);
  out[4] = mode;
  return out;
}

/** `bytes` coded ([Note: a lossless code for a join's skewed bytes]). */
export function encodeBytes(bytes: Uint8Array): Uint8Array {
  const n = bytes.length;
  const counts = new Float64Array(256);
  for (let i = 0; i < n; i++) counts[bytes[i]!]! += 1;
  let lengths: Uint8Array | null = null;
  let bits = 0;
  if (n > 0) {
    lengths = codeLengths(counts);
    for (let s = 0; s < 256; s++) bits += counts[s]! * lengths[s]!;
  }
  const coded = HEADER + 256 + Math.ceil(bits / 8);
  if (lengths === null || coded >= HEADER + n) {
    const out = header(n, 0, HEADER + n);
    out.set(bytes, HEADER);
    return out;
  }
  const codes = canonicalCodes(lengths);
  const out = header(n, 1, coded);
  out.set(lengths, HEADER);
  let at = HEADER + 256;
  let acc = 0;
  let held = 0;
  for (let i = 0; i < n; i++) {
    const s = bytes[i]!;
    acc = (acc << lengths[s]!) | codes[s]!;
    held += lengths[s]!;
    while (held >= 8) {
      held -= 8;
      out[at++] = (acc >>> held) & 0xff;
    }
    acc &= (1 << held) - 1;
  }
  if (held > 0) out[at++] = (acc << (8 - held)) & 0xff;
  return out;
}

function corrupt(reason: string): DilocoArgumentError {
  return new DilocoArgumentError({ op: 'decodeBytes', rank: -1 }, 'coded', reason);
}

/** The bytes `encodeBytes` coded; a `DilocoArgumentError` for input it did not write. */
export function decodeBytes(coded: Uint8Array): Uint8Array {
  if (coded.length < HEADER) throw corrupt(`${coded.length} bytes is shorter than the header`);
  const n = new DataView(coded.buffer, coded.byteOffset, coded.byteLength).getUint32(0, true);
  const mode = coded[4];
  if (mode === 0) {
    if (coded.length !== HEADER + n)
      throw corrupt(`raw mode: ${coded.length - HEADER} of ${n} bytes`);
    return coded.slice(HEADER);
  }
  if (mode !== 1 || coded.length < HEADER + 256) throw corrupt(`unknown mode ${mode}`);
  const lengths = coded.subarray(HEADER, HEADER + 256);
  if (lengths.some((length) => length > MAX_BITS)) throw corrupt('a code length above 15');
  const codes = canonicalCodes(lengths);
  // Every 15-bit window starting with a symbol's code names that symbol and its length.
  const table = new Uint16Array(1 << MAX_BITS);
  for (let s = 0; s < 256; s++) {
    const length = lengths[s]!;
    if (length === 0) continue;
    const first = codes[s]! << (MAX_BITS - length);
    table.fill((s << 4) | length, first, first + (1 << (MAX_BITS - length)));
  }
  const out = new Uint8Array(n);
  const end = coded.length;
  let at = HEADER + 256;
  let acc = 0; // the next bits, most significant first, in the top `held` bits of 32
  let held = 0;
  for (let i = 0; i < n; i++) {
    while (held <= 24) {
      acc = (acc | ((at < end ? coded[at]! : 0) << (24 - held))) >>> 0;
      at++;
      held += 8;
    }
    const entry = table[acc >>> (32 - MAX_BITS)]!;
    const length = entry & 15;
    if (length === 0) throw corrupt(`no code at symbol ${i}`);
    out[i] = entry >> 4;
    acc = (acc << length) >>> 0;
    held -= length;
  }
  if (at - Math.floor(held / 8) > end + 1) throw corrupt('the bits ran out');
  return out;
}
