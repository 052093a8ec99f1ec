import type { HostData } from '../operand.js';
import type { ProcessGroup } from '../process-group.js';
import { averageScalar, gatherScalar } from '../scalar.js';
import { shardRange } from '../shard.js';
import { BusyWork } from './busy.js';
import { firstDifference, hex, type StressMismatch } from './check.js';
import { bitsOf, type PlacementCounts, StressOperands } from './operands.js';
import { elementBytesOf, type StressOp, type StressProgram } from './program.js';
import { type Bits, expectedOutput, fillGarbage, fillInput, scalarValue } from './reference.js';

/** How a rank runs its part of a program. */
export interface RankOptions {
  /** Bytes of the big registered buffer each rank allocates first (0: none). */
  readonly ballastBytes: number;
  /** Side of the pauses' square matmuls (0: spin without them). */
  readonly matmulSize: number;
  /** Each op's deadline, in milliseconds. */
  readonly timeoutMs: number;
  /**
   * What part of its pauses a rank takes (default 1): ranks that share one thread (local, and tcp
   * and ws in process) pause one after another, so each takes 1/n and the world's time stays.
   */
  readonly pauseScale?: number;
}

/** What one rank did and found. */
export interface RankReport {
  readonly rank: number;
  /** Ops this rank took part in, and the output bytes it checked. */
  readonly ops: number;
  readonly checkedBytes: number;
  readonly mismatch: StressMismatch | null;
  /** The first error an op threw (after a mismatch: the abort that followed it). */
  readonly error: string | null;
  /** The op the error came from (the first of its batch). */
  readonly errorOp: number | null;
  readonly matmuls: number;
  readonly matmulThreads: number;
  /** Where this rank's operands landed; and its big buffer's segment (-1: none). */
  readonly placements: PlacementCounts;
  readonly ballastSegment: number;
  readonly elapsedMs: number;
}

/** One op of a batch as this rank runs it: issue it, then check what it left. */
interface Issued {
  readonly op: StressOp;
  readonly groupRank: number;
  readonly pending: Promise<unknown>;
  readonly check: (result: unknown) => StressMismatch | null;
}

/**
 * Runs this rank's part of `program` on `world` (its world group): creates the program's
 * sub-groups, then for each batch issues its ops back to back, awaits them all, checks every output
 * against the reference ([Note: stress reference]) and pauses ([Note: stress pauses]). A mismatch
 * aborts the world (so the other ranks stop at once, with `GroupAbortedError`) and is reported.
 */
export async function runStressRank(
  world: ProcessGroup,
  program: StressProgram,
  options: RankOptions,
): Promise<RankReport> {
  const started = performance.now();
  const groups = program.groups.map((ranks, g) =>
    g === 0 ? world : world.newGroup(ranks, { timeoutMs: options.timeoutMs }),
  );
  const operands = new StressOperands(world, options.ballastBytes);
  const busy = new BusyWork(options.matmulSize);
  let ops = 0;
  let checkedBytes = 0;
  let mismatch: StressMismatch | null = null;
  let error: string | null = null;
  let errorOp: number | null = null;
  try {
    operands.start();
    for (const batch of program.batches) {
      const issued: Issued[] = [];
      try {
        for (const op of batch.ops) {
          const group = groups[op.group];
          if (group === null || group === undefined) continue;
          const one = issue(op, group, world.rank, operands, program.seed);
          if (one === null) continue;
          // The batch fails with its first error; the others must not go unhandled.
          one.pending.catch(() => {});
          issued.push(one);
        }
        const results = await Promise.all(issued.map((one) => one.pending));
        for (let i = 0; i < issued.length && mismatch === null; i++) {
          mismatch = issued[i]!.check(results[i]);
        }
      } catch (e) {
        error = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
        errorOp = batch.ops[0]?.index ?? null;
        break;
      }
      ops += issued.length;
      for (const one of issued) checkedBytes += outputBytes(one.op, one.groupRank, program);
      if (mismatch !== null) {
        world.abort(`stress mismatch on rank ${world.rank} at op #${mismatch.op}`);
        break;
      }
      operands.endBatch();
      busy.run((batch.pauseMs[world.rank] ?? 0) * (options.pauseScale ?? 1));
    }
  } finally {
    busy.dispose();
  }
  const report: RankReport = {
    rank: world.rank,
    ops,
    checkedBytes,
    mismatch,
    error,
    errorOp,
    matmuls: busy.matmuls,
    matmulThreads: busy.threadsInUse,
    placements: operands.counts,
    ballastSegment: operands.ballastSegment,
    elapsedMs: Math.round(performance.now() - started),
  };
  if (error === null && mismatch === null) operands.dispose();
  return report;
}

/** Bytes of the output this rank checked for `op`. */
function outputBytes(op: StressOp, groupRank: number, program: StressProgram): number {
  const size = program.groups[op.group]!.length;
  const element = elementBytesOf(op.dtype);
  if (op.kind === 'sendRecv' && groupRank === op.root) return 0;
  if (op.kind === 'reduceScatter') return shardRange(op.count, size, groupRank).count * element;
  if (op.kind === 'barrier') return 0;
  if (op.kind === 'gatherScalar' || op.kind === 'averageScalar') return 8 * size;
  return op.count * element;
}

/** Issues `op` on this rank (null when it takes no part: the other ranks of a send/recv pair). */
function issue(
  op: StressOp,
  group: ProcessGroup,
  worldRank: number,
  operands: StressOperands,
  seed: number,
): Issued | null {
  const j = group.rank;
  const n = group.size;
  const [inPlace, outPlace] = op.placement[worldRank]!;
  const options = op.dtype === 'f16' || op.dtype === 'bf16' ? { dtype: op.dtype } : {};
  const salt = op.key + worldRank;
  const make = (place: typeof inPlace, count: number) =>
    operands.make(place, op.dtype, count, salt);
  const reduction = op.kind === 'allReduce' || op.kind === 'reduceScatter' ? ` ${op.reduce}` : '';
  const detail =
    `${op.dtype} x ${op.count}${reduction}, group ${op.group} [${group.ranks.join(',')}], ` +
    `placement ${inPlace}/${outPlace}`;
  const verify = (data: HostData): StressMismatch | null => {
    const found = firstDifference(bitsOf(data), expectedOutput(op, j, n));
    if (found === null) return null;
    const width = data.BYTES_PER_ELEMENT;
    return {
      seed,
      op: op.index,
      kind: op.kind,
      rank: worldRank,
      groupRank: j,
      byte: found.byte,
      element: found.element,
      expected: hex(found.expected, width),
      actual: hex(found.actual, width),
      differing: found.differing,
      detail,
    };
  };
  const done = (pending: Promise<unknown>, check: Issued['check']): Issued => ({
    op,
    groupRank: j,
    pending,
    check,
  });
  switch (op.kind) {
    case 'allReduce': {
      const data = make(inPlace, op.count);
      fillInput(op, j, n, bitsOf(data));
      return done(group.allReduce(data, { ...options, op: op.reduce }).promise, () => verify(data));
    }
    case 'reduceScatter': {
      const input = make(inPlace, op.count);
      fillInput(op, j, n, bitsOf(input));
      const output = make(outPlace, shardRange(op.count, n, j).count);
      fillGarbage(op, j, bitsOf(output));
      const work = group.reduceScatter(input, output, { ...options, op: op.reduce });
      return done(work.promise, () => verify(output));
    }
    case 'allGather': {
      const output = make(outPlace, op.count);
      fillGarbage(op, j, bitsOf(output));
      const shard = shardRange(op.count, n, j);
      const input = op.inPlace[worldRank]
        ? output.subarray(shard.start, shard.start + shard.count)
        : make(inPlace, shard.count);
      fillInput(op, j, n, bitsOf(input));
      return done(group.allGather(input, output, options).promise, () => verify(output));
    }
    case 'broadcast': {
      const data = make(j === op.root ? inPlace : outPlace, op.count);
      if (j === op.root) fillInput(op, j, n, bitsOf(data));
      else fillGarbage(op, j, bitsOf(data));
      return done(group.broadcast(data, op.root, options).promise, () => verify(data));
    }
    case 'barrier':
      return done(group.barrier().promise, () => null);
    case 'sendRecv': {
      if (j === op.root) {
        const data = make(inPlace, op.count);
        fillInput(op, j, n, bitsOf(data));
        return done(group.send(data, op.peer, options).promise, () => null);
      }
      if (j !== op.peer) return null;
      const data = make(outPlace, op.count);
      fillGarbage(op, j, bitsOf(data));
      return done(group.recv(data, op.root, options).promise, () => verify(data));
    }
    case 'gatherScalar':
    case 'averageScalar': {
      const values = Array.from({ length: n }, (_, r) => scalarValue(op, r));
      let expected = values;
      if (op.kind === 'averageScalar') {
        let total = 0;
        for (const v of values) total += v;
        expected = [total / n];
      }
      const pending =
        op.kind === 'gatherScalar'
          ? gatherScalar(group, values[j]!)
          : averageScalar(group, values[j]!).then((v) => [v]);
      return done(pending, (result) => {
        const got = new Float64Array(result as number[]);
        const want = new Float64Array(expected);
        // NaN is NaN whatever its payload: JS arithmetic may hand any NaN out.
        for (let i = 0; i < got.length; i++)
          if (Number.isNaN(got[i]) && Number.isNaN(want[i])) got[i] = want[i]!;
        const wantBits = new Uint32Array(want.buffer) as Bits;
        const found = firstDifference(new Uint32Array(got.buffer), (start, out) =>
          out.set(wantBits.subarray(start, start + out.length)),
        );
        if (found === null && got.length === want.length) return null;
        return {
          seed,
          op: op.index,
          kind: op.kind,
          rank: worldRank,
          groupRank: j,
          byte: found?.byte ?? got.byteLength,
          element: Math.floor((found?.element ?? got.length * 2) / 2),
          expected: String(expected[Math.floor((found?.element ?? 0) / 2)]),
          actual: String((result as number[])[Math.floor((found?.element ?? 0) / 2)]),
          differing: found?.differing ?? 1,
          detail: `group ${op.group} [${group.ranks.join(',')}]`,
        };
      });
    }
  }
}
