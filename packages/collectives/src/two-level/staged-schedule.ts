import type { ReduceOp } from '../kernels/reduce.js';
import { bytesOf, type CommDType, type HostData, narrow, widen } from '../operand.js';
import { shardRange } from '../shard.js';
import type { SharedArena } from '../shared-arena.js';
import type { Comm } from '../algorithms/comm.js';
import { ringAllGather } from '../algorithms/gather.js';
import { type ReduceLayout, ringReduce } from '../algorithms/reduce.js';

/**
 * [Note: two-level node phases on staged memory]
 * The node's phases of a two-level collective ([Note: two-level collectives] in
 * two-level/two-level-transport.ts) run on memory every node-mate maps: each rank's operand in
 * the node's shm arena, either the operand itself (a registered buffer from `group.allocate`) or a
 * staging copy of it (one copy in, widened to f32 for f16/bf16). One exchange of arena offsets
 * (`StagedNode.exchange`, a barrier) then says every operand is in (a staging rank copies the
 * parts its node-mates read first, and its own part after the exchange, while they start); from
 * there a rank reads its node-mates' operands in place, with no rounds through the arena's slots:
 *
 * - all-reduce: local rank l sums slice l (`shardRange(count, L, l)`) of every node-mate's
 *   operand into its own, in rank order (the order of the slot schedule: the same bits); the ring
 *   between nodes all-reduces that slice where it lies (the network's receives land in the arena,
 *   segments are reduced and sent from there); a barrier; each rank copies the other slices out
 *   of their owners' operands (narrowing f16/bf16 once).
 * - reduce-scatter: local rank l sums shards b * L + l of every input into a compact run of its
 *   staging, which the ring between nodes reduce-scatters as the slot schedule's `partial` was; no
 *   barrier after it.
 * - all-gather: the ring between nodes gathers shards c * L + l into this rank's staging (or its
 *   registered output); the exchange; each rank copies every node-mate's shards out.
 *
 * So an op costs one or two barriers instead of one per arena slot (a 64 MiB all-reduce on 2
 * ranks a node took 64 + 32 rounds of 1 MiB slots, each a wake-up when the cores are busy), and no
 * copy through the slots. Reuse: a rank's staging alternates between two buffers, op by op. A
 * node-mate reads buffer p of op k only before it enters its next op, whose exchange this rank
 * passes before it writes buffer p again (op k + 2 at the earliest), so staged ops need no barrier
 * at their end. A registered operand is the user's, who may write it as soon as the op returns:
 * when any node-mate's operand is registered (the exchange's flag), every rank waits at a final
 * barrier. A rank that cannot stage (the op exceeds the staging limit, or the arena's reserve is
 * spent) says so in the exchange, and the whole node runs the slot schedule (slot-
 * schedule.ts) instead; the messages between nodes are the same either way, so nodes need not
 * agree.
 */

/** The node's side of a staged op. */
export interface StagedNode {
  readonly rank: number;
  readonly size: number;
  readonly arena: SharedArena;
  /** Publishes `words` (at most 16) and waits for every node-mate's: rank r's at `r * 16`. */
  exchange(words: Int32Array): Promise<Int32Array>;
  barrier(): Promise<void>;
}

/** The ring between nodes over the arena: `comm` and the ring layouts it runs with. */
export interface StagedCross {
  readonly comm: Comm;
  /** A reduce layout of `count` elements at byte offset `work` of the arena. */
  layout(op: ReduceOp, kind: 'f32' | 'i32', count: number, work: number): ReduceLayout;
  /** Segment bytes of the all-gather ring for chunks of `chunkBytes`. */
  segmentBytes(chunkBytes: number): number;
}

export interface StagedStep {
  /** False when this rank cannot run staged (it then says so in the exchange). */
  readonly ready: boolean;
  /**
   * Byte offset and size of this rank's scratch in the arena: the ring's receive slots, free
   * until the ring starts.
   */
  readonly scratch: readonly [number, number];
  readonly node: StagedNode;
  readonly cross: StagedCross;
  /** This op's staging of `bytes` in the arena (byte offset), or -1 when there is none. */
  staging(bytes: number): number;
}

const STRIDE = 16;

/** The phases reduce with this op; `avg` is a sum scaled once at the end. */
function phaseOp(op: ReduceOp): ReduceOp {
  return op === 'avg' ? 'sum' : op;
}

function wideKind(dtype: CommDType): 'f32' | 'i32' {
  return dtype === 'i32' ? 'i32' : 'f32';
}

function wide(kind: 'f32' | 'i32', arena: SharedArena, offset: number, count: number) {
  return kind === 'i32'
    ? new Int32Array(arena.buffer, offset, count)
    : new Float32Array(arena.buffer, offset, count);
}

/** Every node-mate's offset, or null when one could not stage; and whether any is registered. */
async function exchangeOffsets(
  node: StagedNode,
  offset: number,
  registered: boolean,
): Promise<{ offsets: number[]; registered: boolean } | null> {
  const words = await node.exchange(Int32Array.of(offset, registered ? 1 : 0));
  const offsets: number[] = [];
  let any = false;
  for (let r = 0; r < node.size; r++) {
    offsets.push(words[r * STRIDE]!);
    any ||= words[r * STRIDE + 1] === 1;
  }
  return offsets.some((o) => o < 0) ? null : { offsets, registered: any };
}

/**
 * Widens `ranges` (`[start, count]` in elements) of `host` into the same places of the staging at
 * `offset`: what the node-mates read before the exchange, this rank's own part after it.
 */
function stageRanges(
  dtype: CommDType,
  host: HostData,
  arena: SharedArena,
  offset: number,
  ranges: readonly (readonly [number, number])[],
): void {
  const kind = wideKind(dtype);
  for (const [start, length] of ranges) {
    if (length === 0) continue;
    const target = wide(kind, arena, offset + start * 4, length);
    widen(dtype, host.subarray(start, start + length), target);
  }
}

/** `dst = in[0] op in[1] op ...` in rank order over `count` elements at byte `at` of each. */
function reduceInRankOrder(
  arena: SharedArena,
  op: ReduceOp,
  kind: 'f32' | 'i32',
  dst: number,
  inputs: readonly number[],
  at: number,
  count: number,
): void {
  if (inputs.length === 1) {
    new Uint8Array(arena.buffer).copyWithin(dst, inputs[0]! + at, inputs[0]! + at + count * 4);
    return;
  }
  arena.reduceTo(op, kind, dst, inputs[0]! + at, inputs[1]! + at, count);
  for (let r = 2; r < inputs.length; r++) arena.reduce(op, kind, dst, inputs[r]! + at, count);
}

/**
 * The all-reduce's node sum of `count` elements at byte `at` of every operand into this rank's own
 * (`inputs[rank]`), in rank order: `((x0 op x1) op x2) ...`. A rank past 1 would overwrite its own
 * contribution before adding it, so its partial sum of the ranks before it goes through
 * `scratch` piece by piece.
 */
function reduceIntoOwn(
  arena: SharedArena,
  op: ReduceOp,
  kind: 'f32' | 'i32',
  inputs: readonly number[],
  rank: number,
  at: number,
  count: number,
  scratch: readonly [number, number],
): void {
  const own = inputs[rank]! + at;
  if (rank < 2) {
    reduceInRankOrder(arena, op, kind, own, inputs, at, count);
    return;
  }
  const piece = Math.floor(scratch[1] / 4);
  for (let from = 0; from < count; from += piece) {
    const length = Math.min(piece, count - from);
    const offset = at + from * 4;
    reduceInRankOrder(arena, op, kind, scratch[0], inputs.slice(0, rank), offset, length);
    arena.reduceTo(op, kind, own + from * 4, scratch[0], own + from * 4, length);
    for (let r = rank + 1; r < inputs.length; r++)
      arena.reduce(op, kind, own + from * 4, inputs[r]! + offset, length);
  }
}

/**
 * All-reduce `host` in two levels on staged memory (see the Note). `registered` is `host`'s byte
 * offset in the arena when it is a registered f32/i32 buffer, else -1. False, with `host`
 * unchanged, when the node must run the slot schedule instead.
 */
export async function stagedAllReduce(
  step: StagedStep,
  dtype: CommDType,
  host: HostData,
  op: ReduceOp,
  registered: number,
): Promise<boolean> {
  const { node, cross } = step;
  const { arena } = node;
  const count = host.length;
  const kind = wideKind(dtype);
  const slices = Array.from({ length: node.size }, (_, r) => shardRange(count, node.size, r));
  const own = slices[node.rank]!;
  let offset = step.ready ? registered : -1;
  const staged = offset < 0 && step.ready;
  if (staged) {
    offset = step.staging(count * 4);
    const others = slices.filter((_, r) => r !== node.rank);
    if (offset >= 0)
      stageRanges(
        dtype,
        host,
        arena,
        offset,
        others.map((s) => [s.start, s.count]),
      );
  }
  const seen = await exchangeOffsets(node, offset, registered >= 0);
  if (seen === null) return false;
  const { offsets } = seen;
  // Only this rank reads its own slice: staged while the node-mates start on theirs.
  if (staged) stageRanges(dtype, host, arena, offset, [[own.start, own.count]]);
  if (own.count > 0) {
    const at = own.start * 4;
    reduceIntoOwn(arena, phaseOp(op), kind, offsets, node.rank, at, own.count, step.scratch);
    const { comm } = cross;
    const world = node.size * comm.size;
    await ringReduce(
      comm,
      cross.layout(phaseOp(op), kind, own.count, offset + at),
      (c) => {
        const range = shardRange(own.count, comm.size, c);
        return [range.start, range.count];
      },
      {
        input: null,
        result: null,
        resultBase: 0,
        gather: new Uint8Array(arena.buffer, offset + at, own.count * 4),
        scale: op === 'avg' ? 1 / world : null,
      },
    );
  }
  const copyOut = (r: number) => {
    const { start, count: length } = slices[r]!;
    if (length === 0) return;
    narrow(
      dtype,
      wide(kind, arena, offsets[r]! + start * 4, length),
      host.subarray(start, start + length),
    );
  };
  // This rank's own slice is final already: copied out while the node-mates finish theirs.
  if (registered < 0) copyOut(node.rank);
  await node.barrier();
  for (let r = 0; r < node.size; r++) if (r !== node.rank) copyOut(r);
  if (seen.registered) await node.barrier();
  return true;
}

/**
 * Reduce-scatter in two levels on staged memory, to the world's shards (see the Note).
 * `registered`: `input`'s byte offset in the arena when it is a registered f32/i32 buffer that
 * `output` does not overlap, else -1. False, with `output` unchanged, when the node must run the
 * slot schedule instead.
 */
export async function stagedReduceScatter(
  step: StagedStep,
  dtype: CommDType,
  input: HostData,
  output: HostData,
  op: ReduceOp,
  registered: number,
): Promise<boolean> {
  const { node, cross } = step;
  const { arena } = node;
  const { comm } = cross;
  const L = node.size;
  const count = input.length;
  const kind = wideKind(dtype);
  const chunk = (g: number) => shardRange(count, L * comm.size, g);
  const pieces: [number, number][] = [];
  let total = 0;
  for (let b = 0; b < comm.size; b++) {
    const length = chunk(b * L + node.rank).count;
    pieces.push([total, length]);
    total += length;
  }
  const staged = registered >= 0 ? 0 : count * 4;
  const staging = step.ready ? step.staging(staged + total * 4) : -1;
  let offset = registered;
  // The node-mates' shards of every node block before the exchange, this rank's after it.
  const shards = (mine: boolean) => {
    const ranges: [number, number][] = [];
    for (let g = 0; g < L * comm.size; g++) {
      if (g % L === node.rank) {
        if (mine) ranges.push([chunk(g).start, chunk(g).count]);
      } else if (!mine) ranges.push([chunk(g).start, chunk(g).count]);
    }
    return ranges;
  };
  if (registered < 0 && staging >= 0) {
    offset = staging;
    stageRanges(dtype, input, arena, offset, shards(false));
  }
  const seen = await exchangeOffsets(node, staging < 0 ? -1 : offset, registered >= 0);
  if (seen === null) return false;
  if (registered < 0) stageRanges(dtype, input, arena, offset, shards(true));
  const work = staging + staged;
  for (let b = 0; b < comm.size; b++) {
    const [at, length] = pieces[b]!;
    const from = chunk(b * L + node.rank).start * 4;
    if (length > 0)
      reduceInRankOrder(arena, phaseOp(op), kind, work + at * 4, seen.offsets, from, length);
  }
  const exact = dtype === 'f32' || dtype === 'i32';
  const [ownAt, ownLength] = pieces[comm.rank]!;
  await ringReduce(comm, cross.layout(phaseOp(op), kind, total, work), (c) => pieces[c]!, {
    input: null,
    result: exact ? bytesOf(output) : null,
    resultBase: ownAt,
    gather: null,
    scale: op === 'avg' ? 1 / (L * comm.size) : null,
  });
  if (!exact) narrow(dtype, wide(kind, arena, work + ownAt * 4, ownLength), output);
  if (seen.registered) await node.barrier();
  return true;
}

/**
 * All-gather in two levels on staged memory (see the Note): `own` is this rank's shard, already
 * in place in `output` (`count` elements of `element` bytes); `registered` is `output`'s byte
 * offset in the arena when it is a registered buffer, else -1. False when the node must run the
 * slot schedule instead (the ring between nodes has then filled this rank's shards of the node
 * blocks in `output`, as the slot schedule's first phase does).
 */
export async function stagedAllGather(
  step: StagedStep,
  own: Uint8Array,
  output: Uint8Array,
  count: number,
  element: number,
  registered: number,
): Promise<boolean> {
  const { node, cross } = step;
  const { arena } = node;
  const { comm } = cross;
  const L = node.size;
  const range = (g: number): [number, number] => {
    const shard = shardRange(count, L * comm.size, g);
    return [shard.start * element, shard.count * element];
  };
  const offset = !step.ready ? -1 : registered >= 0 ? registered : step.staging(count * element);
  const buffer = offset >= 0 ? new Uint8Array(arena.buffer, offset, count * element) : output;
  let longest = 0;
  for (let c = 0; c < comm.size; c++) longest = Math.max(longest, range(c * L + node.rank)[1]);
  await ringAllGather(
    comm,
    buffer,
    own,
    (c) => range(c * L + node.rank),
    cross.segmentBytes(longest),
  );
  const seen = await exchangeOffsets(node, offset, registered >= 0);
  if (seen === null) {
    if (offset >= 0 && registered < 0) {
      for (let c = 0; c < comm.size; c++) {
        const [start, length] = range(c * L + node.rank);
        output.set(buffer.subarray(start, start + length), start);
      }
    }
    return false;
  }
  const bytes = new Uint8Array(arena.buffer);
  for (let b = 0; b < comm.size; b++) {
    for (let r = 0; r < L; r++) {
      if (r === node.rank && (registered >= 0 || b === comm.rank)) continue;
      const [start, length] = range(b * L + r);
      const from = seen.offsets[r]! + start;
      if (length > 0) output.set(bytes.subarray(from, from + length), start);
    }
  }
  if (seen.registered) await node.barrier();
  return true;
}
