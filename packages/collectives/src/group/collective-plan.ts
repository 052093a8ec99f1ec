import type { ReduceOp } from '../kernels/reduce.js';
import {
  bytesOf,
  elementBytes,
  type HostOperand,
  hostOperand,
  type OperandInfo,
  overlaps,
} from '../operand.js';
import type { OperandStaging } from '../operand-staging.js';
import { placeOwn } from '../algorithms/gather.js';
import { shardRange } from '../shard.js';
import type { SharedArena } from '../shared-arena.js';
import type { GroupView, OpContext } from './op-context.js';
import type { RegisteredBuffers } from './registered-buffers.js';

/** The group settings the choice of algorithm depends on. */
export interface PlanOptions {
  readonly segmentBytes: number | 'auto';
  readonly smallMessageBytes: number;
  readonly sharedMemory: boolean;
}

/**
 * How one group runs its collectives, chosen once when the group is built (`choosePlan` in
 * plan.ts): through the transport's shared arena (`SharedArenaPlan`), in two levels
 * (`TwoLevelPlan`), or over messages (`RingPlan`: the segmented ring, direct exchange of small
 * messages, the ring over registered memory on `tcp`). The bodies run inside the op's turn, after
 * (or, over messages, beside) the fingerprint exchange.
 */
export interface CollectivePlan {
  /** The buffers `allocate` hands out, and the check of operands against them. */
  readonly buffers: RegisteredBuffers;
  /** The arena this group runs collectives through, or null. */
  sharedArena(): SharedArena | null;
  /** `ProcessGroup.allReduce`'s body. */
  allReduce(ctx: OpContext, info: OperandInfo, op: ReduceOp): Promise<void>;
  /** `ProcessGroup.allGather`'s body. */
  allGather(ctx: OpContext, inInfo: OperandInfo, outInfo: OperandInfo): Promise<void>;
  /** `ProcessGroup.reduceScatter`'s body. */
  reduceScatter(
    ctx: OpContext,
    inInfo: OperandInfo,
    outInfo: OperandInfo,
    op: ReduceOp,
  ): Promise<void>;
  /** `ProcessGroup.broadcast`'s body. */
  broadcast(ctx: OpContext, info: OperandInfo, root: number): Promise<void>;
}

/** An all-gather's operands on the host, as every plan starts from them. */
export interface GatherOperands {
  readonly target: HostOperand;
  /** The output's bytes. */
  readonly bytes: Uint8Array;
  /** This rank's input bytes (moved to its place first when it lay elsewhere in the output). */
  readonly own: Uint8Array;
  /** Chunk `c` of the output as `[start, length]` in bytes. */
  readonly chunk: (c: number) => [number, number];
  /** The bytes of one element. */
  readonly element: number;
}

/** The host operands of a reduce-scatter: its input (read) and output (written), staged if need be. */
export function scatterOperands(
  inInfo: OperandInfo,
  outInfo: OperandInfo,
  staging: OperandStaging,
): Promise<[HostOperand, HostOperand]> {
  return Promise.all([
    hostOperand('reduceScatter', inInfo, false, staging),
    hostOperand('reduceScatter', outInfo, true, staging),
  ]);
}

/** The host operands of an all-gather on `group`, its input put in place when it overlaps. */
export async function gatherOperands(
  group: GroupView,
  inInfo: OperandInfo,
  outInfo: OperandInfo,
  staging: OperandStaging,
): Promise<GatherOperands> {
  const [source, target] = await Promise.all([
    hostOperand('allGather', inInfo, false, staging),
    hostOperand('allGather', outInfo, true, staging),
  ]);
  const element = elementBytes(outInfo.dtype);
  const chunk = (c: number): [number, number] => {
    const range = shardRange(outInfo.count, group.size, c);
    return [range.start * element, range.count * element];
  };
  const bytes = bytesOf(target.host);
  let own = bytesOf(source.host);
  if (overlaps(own, bytes)) {
    // An input inside the output but not at its place would be overwritten while it is
    // sent: put it in place first (`set` copies overlapping ranges correctly).
    const [start, length] = chunk(group.rank);
    placeOwn(bytes, own, start);
    own = bytes.subarray(start, start + length);
  }
  return { target, bytes, own, chunk, element };
}

/** Chunk `c` of `count` elements over `size` ranks as `[start, length]` in elements. */
export function elementChunk(count: number, size: number): (c: number) => [number, number] {
  return (c) => {
    const range = shardRange(count, size, c);
    return [range.start, range.count];
  };
}
