import { mulberry32 } from '@webshard/tensor-core';
import { roundToDType } from '@webshard/tensor-core/backend';
import { CollectiveError } from '../errors.js';
import type { ReduceOp } from '../kernels/reduce.js';
import type { CommDType, HostData } from '../operand.js';
import type { ErrorReport } from './suite.js';

// The reference side of the collective suite ([Note: one suite for every transport] in suite.ts):
// errors as plain data, every rank's inputs from a seed, the reductions they must give.

export function errorReport(error: unknown): ErrorReport {
  if (CollectiveError.isInstance(error)) {
    const waitingFor = (error as { waitingFor?: readonly number[] }).waitingFor;
    return {
      name: error.name,
      message: error.message,
      op: error.op,
      seq: error.seq,
      rank: error.rank,
      ...(error.peer === undefined ? {} : { peer: error.peer }),
      ...(waitingFor === undefined ? {} : { waitingFor: [...waitingFor] }),
    };
  }
  const e = error as Error;
  return { name: e?.name ?? 'unknown', message: e?.message ?? String(error) };
}

export function digest(bytes: Uint8Array): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) hash = Math.imul(hash ^ bytes[i]!, 0x01000193);
  return hash >>> 0;
}

export function bytes(data: HostData): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/**
 * Values a rank contributes, chosen so that the reduction is exact in f32 whatever the order
 * (quarter steps for sums, powers of two for products), which lets every algorithm be checked
 * exactly; i32 uses the full range (sums wrap the same in any order).
 */
export function values(
  seed: number,
  rank: number,
  count: number,
  dtype: CommDType,
  op: ReduceOp | 'copy',
): number[] {
  const next = mulberry32(seed * 7919 + rank * 104729 + count);
  const out: number[] = [];
  for (let i = 0; i < count; i++) {
    const u = next();
    if (dtype === 'i32') {
      out.push(op === 'product' ? Math.floor(u * 7) - 3 : Math.floor(u * 4294967296) | 0);
    } else if (op === 'product') {
      out.push([-2, -1, -0.5, 0.5, 1, 2][Math.floor(u * 6)]!);
    } else {
      out.push((Math.floor(u * 65) - 32) / 4);
    }
  }
  return out;
}

export function toHost(dtype: CommDType, numbers: readonly number[]): HostData {
  if (dtype === 'f32') return Float32Array.from(numbers);
  if (dtype === 'i32') return Int32Array.from(numbers);
  const out = new Uint16Array(numbers.length);
  const probe = new Float32Array(1);
  const word = new Uint32Array(probe.buffer);
  for (let i = 0; i < numbers.length; i++) {
    if (dtype === 'bf16') {
      probe[0] = numbers[i]!;
      out[i] = word[0]! >>> 16; // the values are exact in bf16
    } else {
      out[i] = f16Bits(numbers[i]!);
    }
  }
  return out;
}

export function f16Bits(value: number): number {
  // Exact small values only (quarter steps up to 1024): sign, exponent, 10-bit mantissa.
  if (value === 0) return Object.is(value, -0) ? 0x8000 : 0;
  const sign = value < 0 ? 0x8000 : 0;
  const magnitude = Math.abs(value);
  const exponent = Math.floor(Math.log2(magnitude));
  const mantissa = Math.round((magnitude / 2 ** exponent - 1) * 1024);
  return sign | ((exponent + 15) << 10) | mantissa;
}

export function fromHost(dtype: CommDType, data: HostData): number[] {
  if (dtype === 'f32' || dtype === 'i32') return Array.from(data);
  const out: number[] = [];
  const probe = new Uint32Array(1);
  const view = new Float32Array(probe.buffer);
  for (const bits of data as Uint16Array) {
    if (dtype === 'bf16') {
      probe[0] = bits << 16;
      out.push(view[0]!);
    } else {
      const exponent = (bits >>> 10) & 0x1f;
      const mantissa = bits & 0x3ff;
      const magnitude =
        exponent === 0
          ? mantissa * 2 ** -24
          : exponent === 31
            ? mantissa === 0
              ? Number.POSITIVE_INFINITY
              : Number.NaN
            : (1 + mantissa / 1024) * 2 ** (exponent - 15);
      out.push(bits & 0x8000 ? -magnitude : magnitude);
    }
  }
  return out;
}

export function reduceReference(
  op: ReduceOp,
  dtype: CommDType,
  inputs: number[][],
  size: number,
): number[] {
  const count = inputs[0]?.length ?? 0;
  const out: number[] = [];
  for (let i = 0; i < count; i++) {
    let acc = inputs[0]![i]!;
    for (let r = 1; r < inputs.length; r++) {
      const x = inputs[r]![i]!;
      if (dtype === 'i32') {
        if (op === 'sum') acc = (acc + x) | 0;
        else if (op === 'product') acc = Math.imul(acc, x);
        else acc = op === 'max' ? Math.max(acc, x) : Math.min(acc, x);
      } else if (op === 'sum' || op === 'avg') acc = Math.fround(acc + x);
      else if (op === 'product') acc = Math.fround(acc * x);
      else acc = op === 'max' ? Math.max(acc, x) : Math.min(acc, x);
    }
    if (op === 'avg') acc = Math.fround(acc * Math.fround(1 / size));
    out.push(roundToDType(acc, dtype));
  }
  return out;
}

export function compare(name: string, got: number[], expected: number[]): string | null {
  if (got.length !== expected.length)
    return `${name}: ${got.length} elements, expected ${expected.length}`;
  for (let i = 0; i < got.length; i++) {
    if (!Object.is(got[i], expected[i]) && !(got[i] === expected[i])) {
      return `${name}: element ${i} is ${got[i]}, expected ${expected[i]}`;
    }
  }
  return null;
}

export const DTYPES: readonly CommDType[] = ['f32', 'f16', 'bf16', 'i32'];
export const REDUCES: readonly ReduceOp[] = ['sum', 'avg', 'max', 'min', 'product'];

/** Sizes: empty, tiny, primes, one below/above the direct-exchange threshold, several segments. */
export function sizesFor(seed: number, size: number): number[] {
  const next = mulberry32(seed);
  const pool = [0, 1, 2, 3, 5, 13, 61, 64, 67, 97, 251, 1031, 2053];
  const picks = [0, 1, size + 1, 1031];
  for (let i = 0; i < 3; i++) picks.push(pool[Math.floor(next() * pool.length)]!);
  return [...new Set(picks)];
}

export function dtypeOption(dtype: CommDType): { dtype?: 'f16' | 'bf16' } {
  return dtype === 'f16' || dtype === 'bf16' ? { dtype } : {};
}
