import { bytesPerElement, type DType } from '../dtype.js';
import { WebshardError } from '../errors.js';

/**
 * [Note: the safetensors format]
 *
 * A safetensors file is: 8 bytes, the little-endian u64 byte length N of the header; N bytes of
 * UTF-8 JSON (an object, possibly padded with trailing spaces); then the data buffer. The JSON maps
 * each tensor name to `{dtype, shape, data_offsets: [begin, end]}` with offsets in bytes relative
 * to the start of the data buffer, plus an optional `__metadata__` map of strings to strings.
 * The tensors must tile the data buffer exactly: sorted by `begin`, the first starts at 0, each
 * starts where the previous ends, the last ends at the end of the file. Element bytes are
 * little-endian, row-major.
 *
 * Everything about a file is validated from its header before a single byte of tensor memory is
 * allocated, so a bad file fails fast and never yields a partial load. The writer orders tensors by
 * element size (largest first, then as given) and pads the header to 8 bytes, as the Rust library
 * does, so every tensor's data is aligned to its element size within the file.
 */

/** The dtypes safetensors names and the tensor-core dtypes they map to. */
const FROM_FILE: Readonly<Record<string, DType>> = {
  F32: 'f32',
  F16: 'f16',
  BF16: 'bf16',
  I32: 'i32',
  F64: 'f64',
};

const TO_FILE: Readonly<Record<DType, string>> = {
  f32: 'F32',
  f16: 'F16',
  bf16: 'BF16',
  i32: 'I32',
  f64: 'F64',
};

/** The name `__metadata__` is the header's metadata map, never a tensor. */
export const METADATA_KEY = '__metadata__';

/** The largest header accepted (the Rust library's limit): a bigger one is a corrupt length. */
export const MAX_HEADER_BYTES = 100_000_000;

/** A malformed or unreadable safetensors file. `file` is the path, or `<memory>` for bytes. */
export class SafetensorsError extends WebshardError {
  readonly op: string;
  readonly file: string;
  readonly reason: string;
  constructor(op: string, file: string, reason: string, options: { cause?: unknown } = {}) {
    super(`[${op}] ${file}: ${reason}`, { code: 'E_SAFETENSORS', ...options });
    this.op = op;
    this.file = file;
    this.reason = reason;
  }
}

/** One tensor's entry in a safetensors header. Offsets are bytes into the data buffer. */
export interface SafetensorsEntry {
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly begin: number;
  readonly end: number;
}

/** A validated header: tensors in file order, the metadata, and where the data starts. */
export interface SafetensorsHeader {
  readonly tensors: ReadonlyMap<string, SafetensorsEntry>;
  readonly metadata: Readonly<Record<string, string>>;
  /** Byte offset of the data buffer in the file: 8 + the header's length. */
  readonly dataStart: number;
  /** Byte length of the data buffer. */
  readonly dataBytes: number;
}

/** The safetensors name of a dtype (`f32` -> `F32`). */
export function safetensorsDType(dtype: DType): string {
  return TO_FILE[dtype];
}

function isNonNegativeInteger(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

/**
 * The header length from the first 8 bytes, checked against the total byte size.
 * Throws `SafetensorsError` for a short file or a length past its end.
 */
export function parseHeaderLength(
  prefix: Uint8Array,
  totalBytes: number,
  op: string,
  file: string,
): number {
  if (totalBytes < 8 || prefix.byteLength < 8) {
    throw new SafetensorsError(
      op,
      file,
      `truncated: ${totalBytes} bytes is shorter than the 8-byte header length`,
    );
  }
  const view = new DataView(prefix.buffer, prefix.byteOffset, 8);
  const length = view.getBigUint64(0, true);
  if (length > BigInt(MAX_HEADER_BYTES)) {
    throw new SafetensorsError(
      op,
      file,
      `header length ${length} is larger than the ${MAX_HEADER_BYTES}-byte limit`,
    );
  }
  const n = Number(length);
  if (8 + n > totalBytes) {
    throw new SafetensorsError(
      op,
      file,
      `header length ${n} runs past the end of the file (${totalBytes} bytes)`,
    );
  }
  if (n < 2) throw new SafetensorsError(op, file, `header length ${n} is too short for JSON`);
  return n;
}

/**
 * Parse and validate the JSON header (`headerBytes`, without the 8-byte prefix) of a file of
 * `totalBytes` bytes. Checks every entry (dtype, shape, offsets, sizes) and that the entries tile
 * the data buffer exactly; throws `SafetensorsError` naming the first problem.
 */
export function parseHeader(
  headerBytes: Uint8Array,
  totalBytes: number,
  op: string,
  file: string,
): SafetensorsHeader {
  const dataStart = 8 + headerBytes.byteLength;
  const dataBytes = totalBytes - dataStart;
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(headerBytes));
  } catch (error) {
    throw new SafetensorsError(op, file, `header is not valid UTF-8 JSON: ${String(error)}`, {
      cause: error,
    });
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new SafetensorsError(op, file, 'header is not a JSON object');
  }

  // Null-prototype, so a key named `__proto__` is kept (see [Note: tensor names are ordinary keys]).
  const metadata = Object.create(null) as Record<string, string>;
  const rawMetadata = (json as Record<string, unknown>)[METADATA_KEY];
  if (rawMetadata !== undefined) {
    if (typeof rawMetadata !== 'object' || rawMetadata === null || Array.isArray(rawMetadata)) {
      throw new SafetensorsError(op, file, `${METADATA_KEY} is not an object`);
    }
    for (const [key, value] of Object.entries(rawMetadata)) {
      if (typeof value !== 'string') {
        throw new SafetensorsError(op, file, `${METADATA_KEY}.${key} is not a string`);
      }
      metadata[key] = value;
    }
  }

  const entries: [string, SafetensorsEntry][] = [];
  for (const [name, raw] of Object.entries(json as Record<string, unknown>)) {
    if (name === METADATA_KEY) continue;
    entries.push([name, parseEntry(name, raw, op, file)]);
  }

  // The entries must tile [0, dataBytes) in offset order: no overlap, no gap, nothing after.
  const ordered = [...entries].sort((a, b) => a[1].begin - b[1].begin || a[1].end - b[1].end);
  let cursor = 0;
  for (const [name, entry] of ordered) {
    if (entry.end > dataBytes) {
      throw new SafetensorsError(
        op,
        file,
        `tensor '${name}' data_offsets [${entry.begin}, ${entry.end}] are out of range of the ${dataBytes}-byte data buffer`,
      );
    }
    if (entry.begin < cursor) {
      throw new SafetensorsError(
        op,
        file,
        `tensor '${name}' data_offsets [${entry.begin}, ${entry.end}] overlap the previous tensor, which ends at ${cursor}`,
      );
    }
    if (entry.begin > cursor) {
      throw new SafetensorsError(
        op,
        file,
        `tensor '${name}' starts at ${entry.begin}, leaving bytes [${cursor}, ${entry.begin}) of the data buffer uncovered`,
      );
    }
    cursor = entry.end;
  }
  if (cursor !== dataBytes) {
    throw new SafetensorsError(
      op,
      file,
      `tensors cover ${cursor} bytes but the data buffer has ${dataBytes}`,
    );
  }
  return { tensors: new Map(entries), metadata, dataStart, dataBytes };
}

function parseEntry(name: string, raw: unknown, op: string, file: string): SafetensorsEntry {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new SafetensorsError(op, file, `tensor '${name}' is not an object`);
  }
  const { dtype: fileDType, shape, data_offsets: offsets } = raw as Record<string, unknown>;
  if (typeof fileDType !== 'string') {
    throw new SafetensorsError(op, file, `tensor '${name}' has no dtype`);
  }
  const dtype = FROM_FILE[fileDType];
  if (dtype === undefined) {
    throw new SafetensorsError(
      op,
      file,
      `tensor '${name}' has unsupported dtype ${fileDType} (supported: ${Object.keys(FROM_FILE).join(', ')})`,
    );
  }
  if (!Array.isArray(shape) || !shape.every(isNonNegativeInteger)) {
    throw new SafetensorsError(
      op,
      file,
      `tensor '${name}' shape ${JSON.stringify(shape)} is not a list of non-negative integers`,
    );
  }
  if (
    !Array.isArray(offsets) ||
    offsets.length !== 2 ||
    !isNonNegativeInteger(offsets[0]) ||
    !isNonNegativeInteger(offsets[1]) ||
    offsets[1] < offsets[0]
  ) {
    throw new SafetensorsError(
      op,
      file,
      `tensor '${name}' data_offsets ${JSON.stringify(offsets)} are not [begin, end] with 0 <= begin <= end`,
    );
  }
  const [begin, end] = offsets as [number, number];
  let elements = 1;
  for (const d of shape) elements *= d;
  const expected = elements * bytesPerElement(dtype);
  if (end - begin !== expected) {
    throw new SafetensorsError(
      op,
      file,
      `tensor '${name}' of shape [${shape.join(', ')}] ${fileDType} needs ${expected} bytes but data_offsets [${begin}, ${end}] hold ${end - begin}`,
    );
  }
  return { dtype, shape: Object.freeze([...shape]), begin, end };
}

/** What the writer needs to know of each tensor. */
export interface HeaderInput {
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
}

/** The header the writer produces: the bytes to write first, and each tensor's data range. */
export interface BuiltHeader {
  /** The 8-byte length and the padded JSON. */
  readonly bytes: Uint8Array;
  /** Tensors in the order their data follows, with byte offsets into the data buffer. */
  readonly layout: readonly (HeaderInput & { begin: number; end: number })[];
  readonly dataBytes: number;
}

/**
 * Lay out tensors (largest element size first, then in the given order) and build the header
 * bytes, padded with spaces to a multiple of 8. Throws `SafetensorsError` for a reserved name or
 * a non-string metadata value.
 */
export function buildHeader(
  inputs: readonly HeaderInput[],
  metadata: Readonly<Record<string, string>> | undefined,
  op: string,
  file: string,
): BuiltHeader {
  const ordered = inputs
    .map((input, index) => ({ input, index }))
    .sort(
      (a, b) =>
        bytesPerElement(b.input.dtype) - bytesPerElement(a.input.dtype) || a.index - b.index,
    );
  const json = Object.create(null) as Record<string, unknown>;
  if (metadata !== undefined) {
    for (const [key, value] of Object.entries(metadata)) {
      if (typeof value !== 'string') {
        throw new SafetensorsError(op, file, `metadata value '${key}' is not a string`);
      }
    }
    json[METADATA_KEY] = metadata;
  }
  const layout: (HeaderInput & { begin: number; end: number })[] = [];
  let cursor = 0;
  for (const { input } of ordered) {
    if (input.name === METADATA_KEY) {
      throw new SafetensorsError(
        op,
        file,
        `'${METADATA_KEY}' is reserved and cannot name a tensor`,
      );
    }
    let elements = 1;
    for (const d of input.shape) elements *= d;
    const end = cursor + elements * bytesPerElement(input.dtype);
    layout.push({ ...input, begin: cursor, end });
    json[input.name] = {
      dtype: TO_FILE[input.dtype],
      shape: [...input.shape],
      data_offsets: [cursor, end],
    };
    cursor = end;
  }
  const text = new TextEncoder().encode(JSON.stringify(json));
  const padded = Math.ceil(text.byteLength / 8) * 8;
  const bytes = new Uint8Array(8 + padded).fill(0x20, 8 + text.byteLength);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(padded), true);
  bytes.set(text, 8);
  return { bytes, layout, dataBytes: cursor };
}
