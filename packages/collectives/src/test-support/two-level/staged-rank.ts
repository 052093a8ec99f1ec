// A rank of two-level-staged.test.ts: all-reduce, reduce-scatter and all-gather of values whose
// sums depend on the order they are added in, on ordinary arrays and on registered buffers (in
// place, out of place, an output inside its input). Prints one line of FNV digests per case and
// the cases whose result is off the float64 reference by more than rounding.
import { mulberry32 } from '@webshard/tensor-core';
import type { ReduceOp } from '../../kernels/reduce.js';
import { narrow, type CommDType, type HostData, widen } from '../../operand.js';
import { initProcessGroup } from '../../init-process-group.js';
import { shardRange } from '../../shard.js';
import { SUITE_GROUP_OPTIONS } from '../../suites/suite.js';
import { bytes, digest, dtypeOption } from '../../suites/suite-reference.js';

const group = await initProcessGroup({ group: SUITE_GROUP_OPTIONS, timeoutMs: 30_000 });
const { rank, size } = group;
const digests: Record<string, number> = {};
const failures: string[] = [];

/** Rank r's inputs: random f32 values with full mantissas (i32: any 32-bit value). */
function inputs(r: number, count: number, dtype: CommDType): HostData {
  const next = mulberry32(r * 7919 + count * 31 + dtype.length);
  const wide = dtype === 'i32' ? new Int32Array(count) : new Float32Array(count);
  for (let i = 0; i < count; i++)
    wide[i] = dtype === 'i32' ? (next() * 2 ** 32) | 0 : next() * 8 - 4;
  if (dtype === 'f32' || dtype === 'i32') return wide;
  const out = new Uint16Array(count);
  narrow(dtype, wide, out);
  return out;
}

function asNumbers(dtype: CommDType, data: HostData): Float64Array {
  if (dtype === 'f32' || dtype === 'i32') return Float64Array.from(data);
  const wide = new Float32Array(data.length);
  widen(dtype, data, wide);
  return Float64Array.from(wide);
}

/** The reduction of every rank's input over `range`, in float64 (i32 sums wrap). */
function reference(dtype: CommDType, op: ReduceOp, count: number): Float64Array {
  const all = Array.from({ length: size }, (_, r) => asNumbers(dtype, inputs(r, count, dtype)));
  const out = new Float64Array(count);
  for (let i = 0; i < count; i++) {
    let value = all[0]![i]!;
    for (let r = 1; r < size; r++) {
      const x = all[r]![i]!;
      value = op === 'max' ? Math.max(value, x) : op === 'min' ? Math.min(value, x) : value + x;
    }
    if (op === 'avg') value /= size;
    if (dtype === 'i32') value = value | 0;
    out[i] = value;
  }
  return out;
}

function check(name: string, dtype: CommDType, got: HostData, expected: Float64Array): void {
  digests[name] = digest(bytes(got));
  const values = asNumbers(dtype, got);
  const tolerance = dtype === 'f32' ? 1e-5 : dtype === 'i32' ? 0 : 0.05;
  for (let i = 0; i < values.length; i++) {
    if (Math.abs(values[i]! - expected[i]!) > tolerance * Math.max(1, Math.abs(expected[i]!))) {
      failures.push(`${name}: element ${i} is ${values[i]}, expected ${expected[i]}`);
      return;
    }
  }
}

/** A registered copy of `data` (`group.allocate`). */
function registered(dtype: CommDType, data: HostData): HostData {
  const out = group.allocate(dtype, data.length);
  out.set(data);
  return out;
}

const cases: [CommDType, ReduceOp][] = [
  ['f32', 'sum'],
  ['f32', 'avg'],
  ['f32', 'max'],
  ['f16', 'sum'],
  ['bf16', 'avg'],
  ['i32', 'sum'],
];
for (const count of [5, 1003, 4099]) {
  // The largest count (several ring segments between nodes) with fewer cases: CI's time.
  for (const [dtype, op] of count > 1003 ? cases.filter(([, o]) => o === 'sum') : cases) {
    const expected = reference(dtype, op, count);
    for (const where of ['array', 'registered'] as const) {
      const name = `allReduce ${op} ${dtype} ${where} x${count}`;
      const mine = inputs(rank, count, dtype);
      const data = where === 'array' ? mine : registered(dtype, mine);
      await group.allReduce(data, { op, ...dtypeOption(dtype) }).wait();
      check(name, dtype, data, expected);
    }
    const shard = shardRange(count, size, rank);
    const own = expected.slice(shard.start, shard.start + shard.count);
    for (const where of ['array', 'registered', 'both', 'inside'] as const) {
      const name = `reduceScatter ${op} ${dtype} ${where} x${count}`;
      const mine = inputs(rank, count, dtype);
      const input = where === 'array' ? mine : registered(dtype, mine);
      const output =
        where === 'inside'
          ? input.subarray(shard.start, shard.start + shard.count)
          : where === 'both'
            ? group.allocate(dtype, shard.count)
            : mine.slice(0, shard.count).fill(0);
      await group.reduceScatter(input, output, { op, ...dtypeOption(dtype) }).wait();
      check(name, dtype, output, own);
    }
  }
  for (const dtype of ['f32', 'bf16', 'i32'] as const) {
    const full = Array.from({ length: size }, (_, r) => inputs(r, count, dtype));
    const expected = new Float64Array(count);
    for (let r = 0; r < size; r++) {
      const shard = shardRange(count, size, r);
      expected.set(
        asNumbers(dtype, full[r]!).subarray(shard.start, shard.start + shard.count),
        shard.start,
      );
    }
    const shard = shardRange(count, size, rank);
    for (const where of ['array', 'registered', 'in place'] as const) {
      const name = `allGather ${dtype} ${where} x${count}`;
      const output = where === 'array' ? full[0]!.slice().fill(0) : group.allocate(dtype, count);
      const mine = full[rank]!.subarray(shard.start, shard.start + shard.count);
      const input =
        where === 'in place' ? output.subarray(shard.start, shard.start + shard.count) : mine;
      if (where === 'in place') input.set(mine);
      await group.allGather(input, output, dtypeOption(dtype)).wait();
      check(name, dtype, output, expected);
    }
  }
}
process.stdout.write(
  `@@staged ${JSON.stringify({ rank, registered: group.allocatesRegistered, digests, failures })}\n`,
);
await group.close();
