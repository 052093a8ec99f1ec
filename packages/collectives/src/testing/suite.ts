import { Tensor, createCpuBackend } from '@webshard/tensor-core';
import { roundToDType } from '@webshard/tensor-core/backend';
import { CollectiveError } from '../errors.js';
import type { ReduceOp } from '../kernels/reduce.js';
import type { CommDType, HostData } from '../operand.js';
import type { ProcessGroup } from '../process-group.js';
import { shardRange } from '../shard.js';
import { createHostBackend } from './host-backend.js';

/**
 * [Note: one suite for every transport]
 * The suite is a set of jobs that EACH RANK runs on its own `ProcessGroup` (`runSuiteJob`), wherever
 * that rank lives: the same thread (local), a worker thread (shm) or another process (tcp, ws). A
 * job checks its own results against a reference it computes itself (every rank can generate every
 * rank's input from the seed) and returns a plain, structured-cloneable `RankReport`; the test
 * runner (`runTransportSuite`) only compares the reports across ranks. So a transport plugs in by
 * saying how to start `size` ranks and run a job on each.
 */

/** The settings the suite's groups should be created with (small, to exercise the ring paths). */
export const SUITE_GROUP_OPTIONS = {
  timeoutMs: 10_000,
  segmentBytes: 1024,
  smallMessageBytes: 256,
} as const;

/** The failure scenarios; each needs a fresh set of groups. */
export const FAILURE_SCENARIOS = [
  'mismatch-op',
  'mismatch-dtype',
  'mismatch-count',
  'mismatch-reduce-op',
  'mismatch-root',
  'stall',
  'barrier-timeout',
  'kill',
  'kill-mid-ring',
  'kill-rank-0',
] as const;
export type FailureScenario = (typeof FAILURE_SCENARIOS)[number];

/**
 * Whether a job makes a rank die (`SuiteEnvironment.die`): network transports run those with
 * ranks as child processes, which can really die.
 */
export function killsARank(job: SuiteJob): boolean {
  return job.kind === 'failure' && job.scenario.startsWith('kill');
}

/** What the runner asks a rank to do. */
export type SuiteJob =
  | { kind: 'cases'; seed: number }
  | { kind: 'failure'; scenario: FailureScenario };

/** An error as plain data. */
export interface ErrorReport {
  name: string;
  message: string;
  op?: string;
  seq?: number;
  rank?: number;
  peer?: number;
  waitingFor?: number[];
}

/** One case's outcome on one rank. */
export interface CaseReport {
  name: string;
  /** Null when the rank's result matched the reference; else what differed. */
  failure: string | null;
  /** FNV-1a of the result bytes, to compare across ranks (bit-identical results). */
  digest: number;
}

/** A rank's answer to a job. */
export interface RankReport {
  rank: number;
  cases: CaseReport[];
  /** Failure scenarios: the error of the op that failed, and of a call made after it. */
  error?: ErrorReport | null;
  afterError?: ErrorReport | null;
  /** Failure scenarios: milliseconds from issuing the op that failed to its error. */
  elapsedMs?: number;
}

/** Whatever each rank needs from its environment. */
export interface SuiteEnvironment {
  /** Make this rank die now, as a crash would (local: the hub kills it; shm: the worker exits). */
  die(): void;
}

function errorReport(error: unknown): ErrorReport {
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

/** Deterministic pseudo-random numbers (mulberry32). */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function digest(bytes: Uint8Array): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) hash = Math.imul(hash ^ bytes[i]!, 0x01000193);
  return hash >>> 0;
}

function bytes(data: HostData): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/**
 * Values a rank contributes, chosen so that the reduction is exact in f32 whatever the order
 * (quarter steps for sums, powers of two for products), which lets every algorithm be checked
 * exactly; i32 uses the full range (sums wrap the same in any order).
 */
function values(
  seed: number,
  rank: number,
  count: number,
  dtype: CommDType,
  op: ReduceOp | 'copy',
): number[] {
  const next = random(seed * 7919 + rank * 104729 + count);
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

function toHost(dtype: CommDType, numbers: readonly number[]): HostData {
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

function f16Bits(value: number): number {
  // Exact small values only (quarter steps up to 1024): sign, exponent, 10-bit mantissa.
  if (value === 0) return Object.is(value, -0) ? 0x8000 : 0;
  const sign = value < 0 ? 0x8000 : 0;
  const magnitude = Math.abs(value);
  const exponent = Math.floor(Math.log2(magnitude));
  const mantissa = Math.round((magnitude / 2 ** exponent - 1) * 1024);
  return sign | ((exponent + 15) << 10) | mantissa;
}

function fromHost(dtype: CommDType, data: HostData): number[] {
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

function reduceReference(
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

function compare(name: string, got: number[], expected: number[]): string | null {
  if (got.length !== expected.length)
    return `${name}: ${got.length} elements, expected ${expected.length}`;
  for (let i = 0; i < got.length; i++) {
    if (!Object.is(got[i], expected[i]) && !(got[i] === expected[i])) {
      return `${name}: element ${i} is ${got[i]}, expected ${expected[i]}`;
    }
  }
  return null;
}

const DTYPES: readonly CommDType[] = ['f32', 'f16', 'bf16', 'i32'];
const REDUCES: readonly ReduceOp[] = ['sum', 'avg', 'max', 'min', 'product'];

/** Sizes: empty, tiny, primes, one below/above the direct-exchange threshold, several segments. */
function sizesFor(seed: number, size: number): number[] {
  const next = random(seed);
  const pool = [0, 1, 2, 3, 5, 13, 61, 64, 67, 97, 251, 1031, 2053];
  const picks = [0, 1, size + 1, 1031];
  for (let i = 0; i < 3; i++) picks.push(pool[Math.floor(next() * pool.length)]!);
  return [...new Set(picks)];
}

function dtypeOption(dtype: CommDType): { dtype?: 'f16' | 'bf16' } {
  return dtype === 'f16' || dtype === 'bf16' ? { dtype } : {};
}

async function runCases(group: ProcessGroup, seed: number): Promise<CaseReport[]> {
  const { rank, size } = group;
  const reports: CaseReport[] = [];
  const record = async (
    name: string,
    body: () => Promise<{ failure: string | null; data: HostData }>,
  ) => {
    try {
      const { failure, data } = await body();
      reports.push({ name, failure, digest: digest(bytes(data)) });
    } catch (error) {
      reports.push({
        name,
        failure: `threw ${errorReport(error).name}: ${errorReport(error).message}`,
        digest: 0,
      });
    }
  };
  const counts = sizesFor(seed, size);

  for (const dtype of DTYPES) {
    for (const op of REDUCES) {
      if (op === 'avg' && dtype === 'i32') continue;
      for (const count of counts) {
        const name = `allReduce ${op} ${dtype} x${count}`;
        await record(name, async () => {
          const inputs = Array.from({ length: size }, (_, r) => values(seed, r, count, dtype, op));
          const data = toHost(dtype, inputs[rank]!);
          await group.allReduce(data, { op, ...dtypeOption(dtype) }).wait();
          return {
            failure: compare(name, fromHost(dtype, data), reduceReference(op, dtype, inputs, size)),
            data,
          };
        });
      }
    }
    for (const count of counts) {
      const op: ReduceOp = dtype === 'i32' ? 'max' : 'avg';
      const name = `reduceScatter ${op} ${dtype} x${count}`;
      await record(name, async () => {
        const inputs = Array.from({ length: size }, (_, r) => values(seed, r, count, dtype, op));
        const shard = shardRange(count, size, rank);
        const out = toHost(dtype, new Array(shard.count).fill(0));
        await group
          .reduceScatter(toHost(dtype, inputs[rank]!), out, { op, ...dtypeOption(dtype) })
          .wait();
        const expected = reduceReference(op, dtype, inputs, size).slice(
          shard.start,
          shard.start + shard.count,
        );
        return { failure: compare(name, fromHost(dtype, out), expected), data: out };
      });
    }
    for (const count of counts) {
      const name = `allGather ${dtype} x${count}`;
      await record(name, async () => {
        const full = values(seed, 99, count, dtype, 'copy');
        const shard = shardRange(count, size, rank);
        const out = toHost(dtype, new Array(count).fill(0));
        await group
          .allGather(
            toHost(dtype, full.slice(shard.start, shard.start + shard.count)),
            out,
            dtypeOption(dtype),
          )
          .wait();
        return {
          failure: compare(
            name,
            fromHost(dtype, out),
            full.map((v) => roundToDType(v, dtype)),
          ),
          data: out,
        };
      });
    }
    for (const count of dtype === 'f32' ? counts : []) {
      // The input inside the output: at its own place (an all-gather in place, nothing to copy),
      // or at the end of the output, where the other ranks' shards overwrite it.
      for (const where of ['in place', 'at the end'] as const) {
        const name = `allGather ${dtype} x${count} input ${where} of the output`;
        await record(name, async () => {
          const full = values(seed, 98, count, dtype, 'copy');
          const shard = shardRange(count, size, rank);
          const out = toHost(dtype, new Array(count).fill(0));
          const at = where === 'in place' ? shard.start : count - shard.count;
          const input = out.subarray(at, at + shard.count);
          input.set(toHost(dtype, full.slice(shard.start, shard.start + shard.count)));
          await group.allGather(input, out).wait();
          return {
            failure: compare(
              name,
              fromHost(dtype, out),
              full.map((v) => roundToDType(v, dtype)),
            ),
            data: out,
          };
        });
      }
    }
    for (const count of counts) {
      const root = count % size;
      const name = `broadcast ${dtype} x${count} from ${root}`;
      await record(name, async () => {
        const sent = values(seed, root, count, dtype, 'copy');
        const data = toHost(dtype, rank === root ? sent : new Array(count).fill(0));
        await group.broadcast(data, root, dtypeOption(dtype)).wait();
        return { failure: compare(name, fromHost(dtype, data), sent), data };
      });
    }
  }

  await record('barrier', async () => {
    await group.barrier().wait();
    return { failure: null, data: new Int32Array(0) };
  });

  await record('handles awaited out of order', async () => {
    const a = Float32Array.from(values(seed, rank, 300, 'f32', 'sum'));
    const b = Int32Array.from(values(seed + 1, rank, 17, 'i32', 'sum'));
    const c = Float32Array.from([rank]);
    const works = [group.allReduce(a), group.allReduce(b, { op: 'max' }), group.broadcast(c, 0)];
    await works[2]!.wait();
    const completedInOrder = works.every((w) => w.isCompleted);
    await works[1]!.wait();
    await works[0]!.wait();
    const expectA = reduceReference(
      'sum',
      'f32',
      Array.from({ length: size }, (_, r) => values(seed, r, 300, 'f32', 'sum')),
      size,
    );
    const expectB = reduceReference(
      'max',
      'i32',
      Array.from({ length: size }, (_, r) => values(seed + 1, r, 17, 'i32', 'sum')),
      size,
    );
    const failure =
      (completedInOrder ? null : 'later handle completed before earlier ones') ??
      compare('a', Array.from(a), expectA) ??
      compare('b', Array.from(b), expectB) ??
      compare('c', Array.from(c), [0]);
    return { failure, data: a };
  });

  await record('tensors: cpu in place, device-like written back', async () => {
    const cpu = createCpuBackend();
    const device = createHostBackend('webgpu');
    const inputs = Array.from({ length: size }, (_, r) => values(seed, r, 37, 'f32', 'sum'));
    const onCpu = Tensor.empty(cpu, [37], 'f32').write(inputs[rank]!);
    const onDevice = Tensor.empty(device, [37], 'bf16').write(inputs[rank]!);
    const gathered = Tensor.empty(device, [37], 'bf16');
    const shard = shardRange(37, size, rank);
    const mine = onDevice.view([shard.count], shard.start);
    await group.allReduce(onCpu).wait();
    await group.allGather(mine, gathered).wait();
    await group.allReduce(onDevice, { op: 'max' }).wait();
    const failure =
      compare('cpu', Array.from(await onCpu.read()), reduceReference('sum', 'f32', inputs, size)) ??
      compare(
        'gather',
        Array.from(await gathered.read()),
        inputs[0]!.map((_, i) =>
          roundToDType(inputs[Math.floor(i / Math.ceil(37 / size))]![i]!, 'bf16'),
        ),
      ) ??
      compare(
        'device',
        Array.from(await onDevice.read()),
        reduceReference('max', 'bf16', inputs, size),
      );
    return { failure, data: (await onCpu.readRaw()) as Float32Array };
  });

  await record('send and recv around a ring', async () => {
    if (size === 1) return { failure: null, data: new Float32Array(0) };
    const out = Float32Array.from([rank, rank * 10]);
    const into = new Float32Array(2);
    const right = (rank + 1) % size;
    const left = (rank + size - 1) % size;
    const sending = group.send(out, right);
    await group.recv(into, left).wait();
    await sending.wait();
    return { failure: compare('recv', Array.from(into), [left, left * 10]), data: into };
  });

  await record('the arrival hint (rule 9 of the transport contract)', async () => {
    // Straight on the transport, on a tag no group uses (groups' tags are 0 and odd).
    const { transport } = group;
    const tag = 0x7ffffffe;
    if (size === 1 || rank > 1) return { failure: null, data: new Float32Array(0) };
    if (rank === 0) {
      await Promise.all([
        transport.send(1, tag, Uint8Array.from([1, 2, 3])),
        transport.send(1, tag, Uint8Array.from([4, 5])),
      ]);
      return { failure: null, data: new Float32Array(0) };
    }
    const first = new Uint8Array(3);
    const second = new Uint8Array(2);
    const seen: string[] = [];
    let secondReceive: Promise<void> | null = null;
    const firstReceive = transport
      .recv(0, tag, first, () => {
        seen.push(`hint with [${first.join(',')}]`);
        // Posted from the hint, before the next message is matched: it must still get it.
        secondReceive = transport.recv(0, tag, second);
      })
      .then(() => seen.push('resolved'));
    await firstReceive;
    if (secondReceive === null) secondReceive = transport.recv(0, tag, second);
    await secondReceive;
    const ours = ['local', 'shm', 'tcp', 'ws'].includes(transport.kind);
    const expected = ['hint with [1,2,3]', 'resolved'];
    const failure =
      compare('second', Array.from(second), [4, 5]) ??
      (seen.length === 1 && seen[0] === 'resolved' && !ours
        ? null
        : seen.join(' / ') === expected.join(' / ')
          ? null
          : `expected ${expected.join(' / ')}, got ${seen.join(' / ')}`);
    return { failure, data: new Float32Array(0) };
  });

  await record('sub-groups run alongside the world', async () => {
    const evens = Array.from({ length: size }, (_, r) => r).filter((r) => r % 2 === 0);
    const odds = Array.from({ length: size }, (_, r) => r).filter((r) => r % 2 === 1);
    const even = group.newGroup(evens);
    const odd = odds.length > 0 ? group.newGroup(odds) : null;
    const sub = even ?? odd;
    if (sub === null) throw new Error('rank is in neither sub-group');
    const members = rank % 2 === 0 ? evens : odds;
    const subData = Float32Array.from([rank, 1]);
    const worldData = Int32Array.from([rank + 1]);
    const works = [sub.allReduce(subData), group.allReduce(worldData, { op: 'product' })];
    await Promise.all(works.map((w) => w.wait()));
    let factorial = 1;
    for (let r = 1; r <= size; r++) factorial *= r;
    const failure =
      compare('sub', Array.from(subData), [members.reduce((a, b) => a + b, 0), members.length]) ??
      compare('world', Array.from(worldData), [factorial]) ??
      (sub.size === members.length && sub.rank === members.indexOf(rank)
        ? null
        : 'sub-group rank/size wrong');
    await sub.close();
    return { failure, data: subData };
  });
  return reports;
}

async function capture(work: () => Promise<unknown>): Promise<ErrorReport | null> {
  try {
    await work();
    return null;
  } catch (error) {
    return errorReport(error);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The deadline failure scenarios use. */
export const FAILURE_TIMEOUT_MS = 300;

/**
 * How long a stalled rank stays away at most: it returns as soon as its group is aborted, so a
 * working deadline ends the stall after about `FAILURE_TIMEOUT_MS`; a deadline that never fires
 * lets the stalled rank join after this long, and the op then succeeds (and the test fails).
 */
export const STALL_LIMIT_MS = 15_000;

/** Elements of the all-reduce a rank dies in the middle of (`kill-mid-ring`): 256 KiB of f32. */
const MID_RING_COUNT = 64 * 1024;
/** The dying rank dies once this many bytes of that all-reduce have reached it. */
const MID_RING_DIE_AFTER_BYTES = 16 * 1024;

/** Waits until `group` is aborted (by another rank's deadline) or `limitMs` have passed. */
async function stallUntilAborted(group: ProcessGroup, limitMs: number): Promise<void> {
  const until = Date.now() + limitMs;
  while (group.state === 'ready' && Date.now() < until) await sleep(5);
}

/**
 * Calls `die()` once `bytes` bytes of messages of `group` have been received by this rank: a
 * death that is certain to come after data started flowing. It watches the group's transport
 * (every message of a group goes through `transport.recv` with the group's tag).
 */
function dieAfterReceiving(group: ProcessGroup, bytes: number, die: () => void): void {
  const transport = group.transport;
  const recv = transport.recv.bind(transport);
  let received = 0;
  transport.recv = (peer, tag, dst) => {
    const promise = recv(peer, tag, dst);
    if (tag === group.tag) {
      void promise.then(
        () => {
          received += dst.byteLength;
          if (received >= bytes) {
            received = Number.NEGATIVE_INFINITY;
            die();
          }
        },
        () => {},
      );
    }
    return promise;
  };
}

async function runFailure(
  group: ProcessGroup,
  scenario: FailureScenario,
  environment: SuiteEnvironment,
): Promise<RankReport> {
  const { rank, size } = group;
  const last = size - 1;
  const options = { timeoutMs: FAILURE_TIMEOUT_MS };
  // A first op with a long deadline: ranks that start at different times (workers, processes) meet.
  await group.allReduce(new Float32Array([1, 2, 3]), { timeoutMs: 30_000 }).wait();
  let error: ErrorReport | null = null;
  let elapsedMs: number | undefined;
  const timed = async (work: () => Promise<unknown>) => {
    const start = performance.now();
    error = await capture(work);
    elapsedMs = performance.now() - start;
  };
  switch (scenario) {
    case 'mismatch-op':
      await timed(() =>
        rank === 0
          ? group.broadcast(new Float32Array(8), 0, options).wait()
          : group.allReduce(new Float32Array(8), options).wait(),
      );
      break;
    case 'mismatch-dtype':
      await timed(() =>
        group.allReduce(rank === last ? new Int32Array(8) : new Float32Array(8), options).wait(),
      );
      break;
    case 'mismatch-count':
      await timed(() => group.allReduce(new Float32Array(rank === 0 ? 9 : 8), options).wait());
      break;
    case 'mismatch-reduce-op':
      await timed(() =>
        group
          .allReduce(new Float32Array(8), { ...options, op: rank === last ? 'max' : 'sum' })
          .wait(),
      );
      break;
    case 'mismatch-root':
      await timed(() =>
        group.broadcast(new Float32Array(8), rank === last ? last : 0, options).wait(),
      );
      break;
    case 'stall':
      if (rank === last) await stallUntilAborted(group, STALL_LIMIT_MS);
      await timed(() => group.allReduce(new Float32Array(4096), options).wait());
      break;
    case 'barrier-timeout':
      if (rank === last) await stallUntilAborted(group, STALL_LIMIT_MS);
      else await timed(() => group.barrier(options).wait());
      break;
    case 'kill':
    case 'kill-rank-0': {
      // The others are inside the all-reduce, waiting for the victim, when it dies.
      const victim = scenario === 'kill' ? last : 0;
      if (rank === victim) {
        await sleep(50);
        environment.die();
        await sleep(FAILURE_TIMEOUT_MS * 3);
      } else {
        await timed(() => group.allReduce(new Float32Array(4096), { timeoutMs: 20_000 }).wait());
      }
      break;
    }
    case 'kill-mid-ring': {
      // A sub-group of every rank: sub-groups always run on messages (shm's world group would
      // take the shared arena), so the op below is the segmented ring on every transport. The
      // last rank dies after 16 KiB of it reached it, with most of its 256 KiB still to come.
      const ring = group.newGroup(Array.from({ length: size }, (_, r) => r))!;
      if (rank === last) dieAfterReceiving(ring, MID_RING_DIE_AFTER_BYTES, () => environment.die());
      await timed(() =>
        ring.allReduce(new Float32Array(MID_RING_COUNT).fill(1), { timeoutMs: 20_000 }).wait(),
      );
      if (rank === last) await sleep(FAILURE_TIMEOUT_MS * 3);
      break;
    }
  }
  const afterError = await capture(() => group.barrier(options).wait());
  return { rank, cases: [], error, afterError, ...(elapsedMs === undefined ? {} : { elapsedMs }) };
}

/** Run one suite job on this rank's group (the world group of its transport). */
export async function runSuiteJob(
  group: ProcessGroup,
  job: SuiteJob,
  environment: SuiteEnvironment,
): Promise<RankReport> {
  if (job.kind === 'cases') return { rank: group.rank, cases: await runCases(group, job.seed) };
  return runFailure(group, job.scenario, environment);
}
