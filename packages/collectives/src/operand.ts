import { ArgumentError, DTypeError, Tensor } from '@webshard/tensor-core';
import {
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  hostArrayFor,
  hostArrayOf,
} from '@webshard/tensor-core/backend';
import type { OperandStaging } from './operand-staging.js';

/** The element types the collectives move and reduce. 16-bit floats are reduced in f32. */
export type CommDType = 'f32' | 'f16' | 'bf16' | 'i32';

/** Host data a collective accepts: f32, i32, or f16/bf16 raw bits (say which with `dtype`). */
export type HostData = Float32Array | Int32Array | Uint16Array;

/** A tensor of tensor-core (either backend) or host data. */
export type CollectiveData = Tensor | HostData;

/** The checked facts about an operand, known at call time. */
export interface OperandInfo {
  readonly data: CollectiveData;
  readonly dtype: CommDType;
  readonly count: number;
}

/** Host elements to read or fill, and how to put them back where they came from. */
export interface HostOperand {
  readonly dtype: CommDType;
  readonly host: HostData;
  /** Write `host` back into the tensor it came from (nothing for host data and direct views). */
  commit(): void;
}

/**
 * Checks an operand when the op is called (so bad input throws there, not in the returned work):
 * a live tensor of a supported dtype, or a typed array whose dtype is known.
 */
export function describeOperand(
  op: string,
  data: CollectiveData,
  dtype?: 'f16' | 'bf16',
): OperandInfo {
  if (data instanceof Tensor) {
    data.kernel(op);
    if (data.dtype === 'f64') {
      throw new DTypeError(op, [data.dtype], 'collectives move f32, f16, bf16 and i32 tensors');
    }
    return { data, dtype: data.dtype, count: data.size };
  }
  if (data instanceof Float32Array) return { data, dtype: 'f32', count: data.length };
  if (data instanceof Int32Array) return { data, dtype: 'i32', count: data.length };
  if (data instanceof Uint16Array) {
    if (dtype !== 'f16' && dtype !== 'bf16') {
      throw new ArgumentError(
        op,
        `a Uint16Array holds f16 or bf16 bits: pass { dtype: 'f16' } or { dtype: 'bf16' }`,
      );
    }
    return { data, dtype, count: data.length };
  }
  throw new ArgumentError(op, 'expected a Tensor, Float32Array, Int32Array or Uint16Array');
}

/**
 * The host view of a CPU-backend tensor's storage, when the backend keeps it in an ArrayBuffer:
 * the collective then reads and writes the tensor in place.
 */
export function directView(tensor: Tensor, dtype: CommDType): HostData | null {
  if (tensor.dtype !== dtype) return null;
  return hostArrayOf(tensor, 'collective') as HostData | null;
}

/**
 * The operand's elements on the host. `fill` (true for outputs that are overwritten whole) skips
 * reading the tensor. Tensors not viewable in place are read into a host array and written back by
 * `commit` with the backend's `write`: never a view on shared memory, which the `webgpu` package's
 * `queue.writeBuffer` cannot take (ANCHORS.md). With `staging` (the group's), that array is one of
 * the group's reused arrays, lent to the backend's write (see [Note: operand staging]); without it,
 * a fresh array.
 */
export async function hostOperand(
  op: string,
  info: OperandInfo,
  fill: boolean,
  staging?: OperandStaging,
): Promise<HostOperand> {
  const { data, dtype } = info;
  if (!(data instanceof Tensor)) return { dtype, host: data, commit: () => {} };
  const direct = directView(data, dtype);
  if (direct !== null) return { dtype, host: direct, commit: () => {} };
  const host = staging?.take(dtype, data.size) ?? (hostArrayFor(dtype, data.size) as HostData);
  if (!fill) await data.backend.read(data.kernel(op), host);
  return {
    dtype,
    host,
    commit: () => data.backend.write(data.kernel(op), host, staging?.lend(host)),
  };
}

let f16Table: Float32Array | null = null;

/** Decode f16 bits through a 64 Ki-entry table (built once from tensor-core's decoder). */
function f16Decoder(): Float32Array {
  if (f16Table === null) {
    f16Table = new Float32Array(65536);
    for (let bits = 0; bits < 65536; bits++) f16Table[bits] = f16BitsToF32(bits);
  }
  return f16Table;
}

/** Copy host elements into 4-byte working elements: f32 and i32 as they are, f16/bf16 widened. */
export function widen(dtype: CommDType, source: HostData, target: Float32Array | Int32Array): void {
  if (dtype === 'f32' || dtype === 'i32') {
    (target as Float32Array).set(source as Float32Array);
    return;
  }
  const bits = source as Uint16Array;
  if (dtype === 'bf16') {
    const words = new Uint32Array(target.buffer, target.byteOffset, target.length);
    for (let i = 0; i < bits.length; i++) words[i] = bits[i]! << 16;
    return;
  }
  const table = f16Decoder();
  for (let i = 0; i < bits.length; i++) target[i] = table[bits[i]!]!;
}

/**
 * Copy working elements back into host elements; f16/bf16 round to nearest even with
 * tensor-core's bit-exact converters, so every rank rounds the same f32 to the same bits.
 */
export function narrow(
  dtype: CommDType,
  source: Float32Array | Int32Array,
  target: HostData,
): void {
  if (dtype === 'f32' || dtype === 'i32') {
    (target as Float32Array).set(source as Float32Array);
    return;
  }
  const bits = target as Uint16Array;
  const encode = dtype === 'bf16' ? f32ToBf16Bits : f32ToF16Bits;
  for (let i = 0; i < source.length; i++) bits[i] = encode(source[i]!);
}

/** Bytes of one element as it travels (f16/bf16 travel as their 2-byte bits in gathers). */
export function elementBytes(dtype: CommDType): number {
  return dtype === 'f16' || dtype === 'bf16' ? 2 : 4;
}

/** The bytes of host data, as a view. */
export function bytesOf(host: HostData): Uint8Array {
  return new Uint8Array(host.buffer, host.byteOffset, host.byteLength);
}

/** Whether two views share bytes (then an op must not write one while it still reads the other). */
export function overlaps(a: Uint8Array, b: Uint8Array): boolean {
  return (
    a.buffer === b.buffer &&
    a.byteOffset < b.byteOffset + b.byteLength &&
    b.byteOffset < a.byteOffset + a.byteLength
  );
}
