import type { ReduceOp } from '../kernels/reduce.js';
import type { CommDType } from '../operand.js';
import { deriveKey, Stream } from './random.js';

/** The calls a stress program makes: the six collectives and the scalar helpers. */
export type StressOpKind =
  | 'allReduce'
  | 'allGather'
  | 'reduceScatter'
  | 'broadcast'
  | 'barrier'
  | 'sendRecv'
  | 'gatherScalar'
  | 'averageScalar';

/**
 * Where a rank's operand lives: an ordinary array, a registered buffer (`group.allocate`), a view
 * at an odd offset into a larger array or a larger registered buffer, or a view at the end of this
 * rank's big registered buffer (which lies in segment 0 on some ranks and segment 1 on others, see
 * [Note: stress programs]).
 */
export type Placement = 'plain' | 'registered' | 'view' | 'registeredView' | 'bigTail';

/** One call of a program, the same on every rank. */
export interface StressOp {
  /** Its index in the program (what a mismatch names). */
  readonly index: number;
  readonly kind: StressOpKind;
  /** Index into `StressProgram.groups`. */
  readonly group: number;
  readonly dtype: CommDType;
  /** Elements of the full operand (the all-gather's output, the reduce-scatter's input). */
  readonly count: number;
  readonly reduce: ReduceOp;
  /** Broadcast's root, or the sender of a send/recv pair (group ranks). */
  readonly root: number;
  /** The receiver of a send/recv pair (group rank). */
  readonly peer: number;
  /** Where each world rank keeps its input and its output (`[input, output]`). */
  readonly placement: readonly (readonly [Placement, Placement])[];
  /** Per world rank: an all-gather's input is its own slice of the output. */
  readonly inPlace: readonly boolean[];
  /** The key of the op's data ([Note: stress randomness]). */
  readonly key: number;
}

/** Ops issued together before any is awaited, then each rank's pause. */
export interface StressBatch {
  readonly ops: readonly StressOp[];
  /** Milliseconds of synchronous work each world rank does after the batch. */
  readonly pauseMs: readonly number[];
}

export interface StressProgram {
  readonly seed: number;
  readonly worldSize: number;
  /** World ranks of each group; group 0 is the world, the others come from `newGroup` in order. */
  readonly groups: readonly (readonly number[])[];
  readonly batches: readonly StressBatch[];
}

/** What a program may contain. */
export interface ProgramOptions {
  /** Ops in the program. */
  readonly ops: number;
  /** The largest operand in bytes (the full buffer of an op). */
  readonly maxBytes: number;
  /** The longest pause between batches, in milliseconds. */
  readonly maxPauseMs: number;
  /** Ops in flight at once, at most (1-4). */
  readonly maxInFlight: number;
  /** Sub-groups from `newGroup` besides the world. */
  readonly subGroups: boolean;
  /** Operands at the end of each rank's big registered buffer ([Note: stress programs]). */
  readonly bigTail: boolean;
}

const KINDS: readonly StressOpKind[] = [
  'allReduce',
  'allGather',
  'reduceScatter',
  'broadcast',
  'barrier',
  'sendRecv',
  'gatherScalar',
  'averageScalar',
];
const KIND_WEIGHTS = [22, 16, 20, 10, 4, 12, 4, 4];
const DTYPES: readonly CommDType[] = ['f32', 'i32', 'f16', 'bf16'];
const DTYPE_WEIGHTS = [4, 2, 2, 2];
const FLOAT_OPS: readonly ReduceOp[] = ['sum', 'avg', 'max', 'min', 'product'];
const INT_OPS: readonly ReduceOp[] = ['sum', 'max', 'min', 'product'];

/** Bytes per element as the caller holds it. */
export function elementBytesOf(dtype: CommDType): number {
  return dtype === 'f16' || dtype === 'bf16' ? 2 : 4;
}

/**
 * [Note: stress programs]
 * A program is drawn from the seed alone, in one fixed order, so every rank draws the same one:
 * the sub-groups (two or three random subsets of the world, one of them possibly the whole world,
 * which then runs on messages where the world group runs on shm's arena), then batches of one to
 * `maxInFlight` ops issued back to back before any is awaited, each followed by a pause of its own
 * length on each rank (a quarter of them none, the rest `maxPauseMs * u^2`). An op's size is
 * log-uniform with the big ones rarer: 2^(2 + (log2(maxBytes) - 2) * u^2) bytes, so with the
 * default 256 MiB half the ops are under 400 bytes, 7 in 10 under 32 KiB and one in 25 over 64
 * MiB; one op in 50 has no elements. Each operand is placed (an ordinary array, a registered
 * buffer, a view at an odd element offset into an ordinary or a registered one, or with `bigTail`
 * a view at the end of its big registered buffer): for 2 in 5 operands every rank alike (the
 * in-place schedules need every rank's operand registered), for the others each rank on its own,
 * so ranks of one op disagree about where their operands live: the case the shm schedules must
 * agree on ([Note: registered buffers]). Reductions draw their data so that every order of
 * reduction gives the same bits ([Note: stress reference] in reference.ts); gathers, broadcasts
 * and sends move random bits, NaNs included.
 */
export function generateProgram(
  seed: number,
  worldSize: number,
  options: ProgramOptions,
): StressProgram {
  const stream = new Stream(deriveKey(seed, 0));
  const groups: number[][] = [Array.from({ length: worldSize }, (_, r) => r)];
  if (options.subGroups && worldSize >= 2) {
    const extra = stream.int(2, 3);
    for (let g = 0; g < extra; g++) {
      groups.push(stream.subset(worldSize, stream.int(2, worldSize)));
    }
  }
  const log2Max = Math.log2(Math.max(4, options.maxBytes));
  const batches: StressBatch[] = [];
  let index = 0;
  while (index < options.ops) {
    const inFlight = Math.min(stream.int(1, options.maxInFlight), options.ops - index);
    const ops: StressOp[] = [];
    let batchBytes = 0;
    for (let k = 0; k < inFlight; k++) {
      const kind = stream.pick(KINDS, KIND_WEIGHTS);
      const group = groups.length > 1 && stream.chance(0.3) ? stream.int(1, groups.length - 1) : 0;
      const size = groups[group]!.length;
      const dtype = stream.pick(DTYPES, DTYPE_WEIGHTS);
      const reduce = stream.pick(dtype === 'i32' ? INT_OPS : FLOAT_OPS);
      const u = stream.next();
      let bytes = 2 ** (2 + (log2Max - 2) * u * u);
      // A batch holds at most 1.5 x the largest op, so four big ones never meet.
      bytes = Math.min(bytes, Math.max(4, 1.5 * options.maxBytes - batchBytes));
      const count = stream.chance(0.02)
        ? 0
        : Math.max(1, Math.floor(bytes / elementBytesOf(dtype)));
      batchBytes += count * elementBytesOf(dtype);
      const root = stream.int(0, size - 1);
      let peer = stream.int(0, size - 2);
      if (peer >= root) peer++;
      const one = (): Placement => {
        if (options.bigTail && stream.chance(0.2)) return 'bigTail';
        return stream.pick(
          ['plain', 'registered', 'view', 'registeredView'] as const,
          [4, 4, 2, 2],
        );
      };
      // Each operand: the same place on every rank (the in-place schedules need all registered),
      // or each rank its own.
      const [inAlike, outAlike] = [stream.chance(0.4), stream.chance(0.4)];
      const [inPlace0, outPlace0] = [one(), one()];
      const placement = Array.from(
        { length: worldSize },
        () => [inAlike ? inPlace0 : one(), outAlike ? outPlace0 : one()] as const,
      );
      const inPlace = Array.from({ length: worldSize }, () => stream.chance(0.25));
      ops.push({
        index: index++,
        kind,
        group,
        dtype,
        count,
        reduce,
        root,
        peer,
        placement,
        inPlace,
        key: deriveKey(seed, 1, index),
      });
    }
    const pauseMs = Array.from({ length: worldSize }, () => {
      if (stream.chance(0.25)) return 0;
      const u = stream.next();
      return Math.round(options.maxPauseMs * u * u);
    });
    batches.push({ ops, pauseMs });
  }
  return { seed, worldSize, groups, batches };
}
