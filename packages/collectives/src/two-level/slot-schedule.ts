import type { ReduceOp } from '../kernels/reduce.js';
import { bytesOf, type CommDType, elementBytes, type HostData, narrow } from '../operand.js';
import { shardRange } from '../shard.js';
import type { Comm } from '../algorithms/comm.js';
import {
  type SharedStep,
  sharedAllGather,
  sharedReduceScatterShards,
} from '../algorithms/shared.js';

/** 4-byte elements as the phases between nodes carry them (f16/bf16 partial sums in f32). */
export type WideData = Float32Array | Int32Array;

/**
 * The phase between nodes, over `comm` (this rank's node index among the ranks of the same local
 * index on every node): rings the group's plan runs with its own staging.
 */
export interface CrossPhase {
  readonly comm: Comm;
  /** All-reduce `data` in place; the final elements are multiplied by `scale` unless null. */
  allReduce(data: WideData, op: ReduceOp, scale: number | null): Promise<void>;
  /**
   * Reduce-scatter `input`, whose piece for node c is `piece(c)` (`[start, length]` in elements):
   * this node's reduced piece goes to `output`.
   */
  reduceScatter(
    input: WideData,
    piece: (node: number) => [number, number],
    output: WideData,
    op: ReduceOp,
    scale: number | null,
  ): Promise<void>;
}

/** One op's two phases, and scratch memory of 4-byte elements that lives as long as the group. */
export interface TwoLevelStep {
  /** The node's shm arena: local rank and size. */
  readonly local: SharedStep;
  readonly cross: CrossPhase;
  /** A scratch array of `count` elements of `kind` (reused from op to op). */
  scratch(kind: 'f32' | 'i32', count: number): WideData;
}

/** The phases reduce with this op; `avg` is a sum scaled once at the end. */
function phaseOp(op: ReduceOp): ReduceOp {
  return op === 'avg' ? 'sum' : op;
}

function wideKind(dtype: CommDType): 'f32' | 'i32' {
  return dtype === 'i32' ? 'i32' : 'f32';
}

/**
 * All-reduce in two levels ([Note: two-level collectives] in two-level/two-level-transport.ts): a
 * reduce-scatter in the node leaves local rank l the node's sum of slice l (f32 and i32 in place in
 * `host`, f16/bf16 in f32 scratch), an all-reduce of that slice between nodes, then an all-gather
 * in the node.
 */
export async function twoLevelAllReduce(
  step: TwoLevelStep,
  dtype: CommDType,
  host: HostData,
  op: ReduceOp,
): Promise<void> {
  const { local, cross } = step;
  const world = local.size * cross.comm.size;
  const kind = wideKind(dtype);
  const shards = Array.from({ length: local.size }, (_, r) =>
    shardRange(host.length, local.size, r),
  );
  const own = shards[local.rank]!;
  const inPlace = dtype === 'f32' || dtype === 'i32';
  const slice = inPlace
    ? (host.subarray(own.start, own.start + own.count) as WideData)
    : step.scratch(kind, own.count);
  await sharedReduceScatterShards(local, dtype, host, shards, slice, kind, phaseOp(op));
  if (own.count > 0) await cross.allReduce(slice, phaseOp(op), op === 'avg' ? 1 / world : null);
  if (!inPlace) narrow(dtype, slice, host.subarray(own.start, own.start + own.count));
  const element = elementBytes(dtype);
  const bytes = bytesOf(host);
  await sharedAllGather(
    local,
    bytes.subarray(own.start * element, (own.start + own.count) * element),
    bytes,
    (r) => [shards[r]!.start * element, shards[r]!.count * element],
  );
}

/**
 * Reduce-scatter in two levels, to the world's shards (`shardRange(count, nodes * L, n * L + l)`):
 * for each node block b, a reduce-scatter in the node of shards b * L .. b * L + L - 1, so local
 * rank l holds the node's sums of shards b * L + l for every b (in f32 scratch for f16/bf16), then
 * a reduce-scatter of those pieces between nodes.
 */
export async function twoLevelReduceScatter(
  step: TwoLevelStep,
  dtype: CommDType,
  input: HostData,
  output: HostData,
  op: ReduceOp,
): Promise<void> {
  const { local, cross } = step;
  const L = local.size;
  const nodes = cross.comm.size;
  const kind = wideKind(dtype);
  const chunk = (g: number) => shardRange(input.length, L * nodes, g);
  const pieces: [number, number][] = [];
  let total = 0;
  for (let b = 0; b < nodes; b++) {
    const length = chunk(b * L + local.rank).count;
    pieces.push([total, length]);
    total += length;
  }
  const own = pieces[cross.comm.rank]![1];
  const inPlace = dtype === 'f32' || dtype === 'i32';
  const scratch = step.scratch(kind, total + (inPlace ? 0 : own));
  const partial = scratch.subarray(0, total);
  for (let b = 0; b < nodes; b++) {
    const shards = Array.from({ length: L }, (_, r) => chunk(b * L + r));
    const [start, length] = pieces[b]!;
    const into = partial.subarray(start, start + length);
    await sharedReduceScatterShards(local, dtype, input, shards, into, kind, phaseOp(op));
  }
  const result = inPlace ? (output as WideData) : scratch.subarray(total, total + own);
  const scale = op === 'avg' ? 1 / (L * nodes) : null;
  await cross.reduceScatter(partial, (c) => pieces[c]!, result, phaseOp(op), scale);
  if (!inPlace) narrow(dtype, result, output);
}

/**
 * The node's phase of a two-level all-gather in rounds through the arena's slots, the fallback of
 * `stagedAllGather` (whose ring between nodes already put this rank's shard of every node block
 * in `output`): each node block's shards are gathered in the node.
 */
export async function nodeAllGather(
  step: TwoLevelStep,
  output: Uint8Array,
  count: number,
  element: number,
): Promise<void> {
  const { local, cross } = step;
  const L = local.size;
  const world = L * cross.comm.size;
  const range = (g: number): [number, number] => {
    const shard = shardRange(count, world, g);
    return [shard.start * element, shard.count * element];
  };
  for (let b = 0; b < cross.comm.size; b++) {
    const [start, length] = range(b * L + local.rank);
    await sharedAllGather(local, output.subarray(start, start + length), output, (r) =>
      range(b * L + r),
    );
  }
}
