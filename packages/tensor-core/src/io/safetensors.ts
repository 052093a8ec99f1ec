import type { Backend, KernelTensor } from '../backend/backend.js';
import { bytesPerElement, type DType, type HostArray } from '../dtype.js';
import { Tensor } from '../tensor.js';
import {
  buildHeader,
  type HeaderInput,
  parseHeader,
  parseHeaderLength,
} from './safetensors-format.js';

/**
 * [Note: tensor names are ordinary keys]
 * A tensor may be called anything JSON can spell, `__proto__` and `constructor` included (PyTorch
 * does not forbid them). The maps that hold tensors by name (the header parser's `Map`, the
 * returned `tensors` and `metadata`, the header JSON the writer builds) are null-prototype
 * objects, so such a name is a key like any other: assigning `out['__proto__']` on a plain object
 * would set its prototype instead, dropping the tensor and leaking its storage.
 *
 * Host arrays are little-endian, as on every platform Node and browsers run on, which is the byte
 * order the format specifies.
 */

/** The `file` named in errors about bytes in memory. */
const MEMORY = '<memory>';

/**
 * What a safetensors file holds: its tensors (in file order) and its metadata. Both are
 * null-prototype objects (see [Note: tensor names are ordinary keys]).
 */
export interface SafetensorsContents {
  tensors: Record<string, Tensor>;
  metadata: Record<string, string>;
}

export function hostView(
  dtype: DType,
  buffer: ArrayBuffer,
  byteOffset: number,
  bytes: number,
): HostArray {
  const length = bytes / bytesPerElement(dtype);
  switch (dtype) {
    case 'f32':
      return new Float32Array(buffer, byteOffset, length);
    case 'i32':
      return new Int32Array(buffer, byteOffset, length);
    case 'f64':
      return new Float64Array(buffer, byteOffset, length);
    default:
      return new Uint16Array(buffer, byteOffset, length);
  }
}

/** The kernel operand for elements [start, start + count) of a tensor. */
export function window(tensor: Tensor, op: string, start: number, count: number): KernelTensor {
  const whole = tensor.kernel(op);
  return { ...whole, offset: whole.offset + start, shape: [count] };
}

export function freeAll(tensors: Record<string, Tensor>): void {
  for (const tensor of Object.values(tensors)) tensor.free();
}

/** An empty null-prototype record: `__proto__` is an ordinary key of it. */
export function record<T>(): Record<string, T> {
  return Object.create(null) as Record<string, T>;
}

export function headerInputs(tensors: Record<string, Tensor>, op: string): HeaderInput[] {
  return Object.entries(tensors).map(([name, tensor]) => {
    tensor.kernel(op);
    return { name, dtype: tensor.dtype, shape: tensor.shape };
  });
}

/**
 * Encode tensors and optional metadata as safetensors bytes, in memory (for browsers, or small
 * files). The same layout as `saveSafetensors`.
 */
export async function encodeSafetensors(
  tensors: Record<string, Tensor>,
  metadata?: Record<string, string>,
): Promise<Uint8Array> {
  const op = 'encodeSafetensors';
  const header = buildHeader(headerInputs(tensors, op), metadata, op, MEMORY);
  const out = new Uint8Array(header.bytes.byteLength + header.dataBytes);
  out.set(header.bytes, 0);
  for (const entry of header.layout) {
    const host = await tensors[entry.name]!.readRaw();
    out.set(
      new Uint8Array(host.buffer, host.byteOffset, host.byteLength),
      header.bytes.byteLength + entry.begin,
    );
  }
  return out;
}

/**
 * Decode safetensors bytes onto `backend`. Validates the whole header first; throws
 * `SafetensorsError` for malformed bytes, having allocated nothing.
 */
export function decodeSafetensors(
  bytes: Uint8Array,
  options: { backend: Backend },
): SafetensorsContents {
  const op = 'decodeSafetensors';
  const headerLength = parseHeaderLength(bytes, bytes.byteLength, op, MEMORY);
  const header = parseHeader(bytes.subarray(8, 8 + headerLength), bytes.byteLength, op, MEMORY);
  const tensors = record<Tensor>();
  try {
    for (const [name, entry] of header.tensors) {
      const tensor = Tensor.empty(options.backend, entry.shape, entry.dtype);
      tensor.name = name;
      tensors[name] = tensor;
      if (tensor.size === 0) continue;
      const at = bytes.byteOffset + header.dataStart + entry.begin;
      const length = entry.end - entry.begin;
      // Typed arrays need aligned views, and WebGPU cannot upload from a SharedArrayBuffer: copy
      // the bytes in either case, view them in place otherwise.
      const inPlace =
        bytes.buffer instanceof ArrayBuffer && at % bytesPerElement(entry.dtype) === 0;
      const start = at - bytes.byteOffset;
      const host = inPlace
        ? hostView(entry.dtype, bytes.buffer, at, length)
        : hostView(entry.dtype, bytes.slice(start, start + length).buffer, 0, length);
      options.backend.write(tensor.kernel(op), host);
    }
  } catch (error) {
    freeAll(tensors);
    throw error;
  }
  return { tensors, metadata: Object.assign(record<string>(), header.metadata) };
}
