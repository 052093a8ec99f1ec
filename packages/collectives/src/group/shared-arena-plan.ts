import {
  type SharedStep,
  sharedAllGather,
  sharedAllGatherRegistered,
  sharedAllReduce,
  sharedAllReduceRegistered,
  sharedBroadcast,
  sharedReduceScatter,
  sharedReduceScatterRegistered,
} from '../algorithms/shared.js';
import { placeOwn } from '../algorithms/gather.js';
import type { ReduceOp } from '../kernels/reduce.js';
import { bytesOf, hostOperand, type OperandInfo } from '../operand.js';
import type { OperandStaging } from '../operand-staging.js';
import { splitAddress } from '../registered-segments.js';
import type { SharedArena } from '../shared-arena.js';
import {
  type CollectivePlan,
  gatherOperands,
  type PlanOptions,
  scatterOperands,
} from './collective-plan.js';
import { registeredOffsetsOf } from './fingerprint.js';
import type { GroupView, OpContext } from './op-context.js';
import { RegisteredBuffers } from './registered-buffers.js';
import { ringStagingBytes } from './ring-layout.js';

/**
 * The world group of an `shm` transport (more than one rank, `sharedMemory` on): every collective
 * runs through the arena all ranks map, on the operands in place when all of them are registered
 * buffers in the arena (the ranks learn each other's offsets with the fingerprint exchange), else
 * through the arena's slots.
 */
export class SharedArenaPlan implements CollectivePlan {
  readonly buffers: RegisteredBuffers;

  constructor(
    private readonly group: GroupView,
    private readonly arena: SharedArena,
    options: PlanOptions,
    /** Host arrays for tensor operands: see [Note: operand staging]. */
    private readonly staging: OperandStaging,
  ) {
    const settings = { segmentBytes: options.segmentBytes, size: group.size };
    this.buffers = new RegisteredBuffers(group, () => arena, 2 * ringStagingBytes(settings) + 64);
  }

  sharedArena(): SharedArena {
    return this.arena;
  }

  async allReduce(ctx: OpContext, info: OperandInfo, op: ReduceOp): Promise<void> {
    const operand = await hostOperand('allReduce', info, false, this.staging);
    const step = this.step(ctx);
    const offsets = registeredOffsetsOf(ctx, this.group.size);
    if (offsets !== null) {
      await sharedAllReduceRegistered(step, info.dtype as 'f32' | 'i32', offsets, info.count, op);
      return;
    }
    this.staging.staged(2 * operand.host.byteLength);
    await sharedAllReduce(step, info.dtype, operand.host, op);
    operand.commit();
  }

  async allGather(ctx: OpContext, inInfo: OperandInfo, outInfo: OperandInfo): Promise<void> {
    const { target, bytes, own, chunk } = await gatherOperands(
      this.group,
      inInfo,
      outInfo,
      this.staging,
    );
    const step = this.step(ctx);
    const offsets = registeredOffsetsOf(ctx, this.group.size);
    placeOwn(bytes, own, chunk(this.group.rank)[0]);
    if (offsets !== null) await sharedAllGatherRegistered(step, own, offsets, chunk);
    else {
      // Its own shard into its slot, every other rank's out of theirs.
      this.staging.staged(bytes.byteLength);
      await sharedAllGather(step, own, bytes, chunk);
    }
    target.commit();
  }

  async reduceScatter(
    ctx: OpContext,
    inInfo: OperandInfo,
    outInfo: OperandInfo,
    op: ReduceOp,
  ): Promise<void> {
    const [source, target] = await scatterOperands(inInfo, outInfo, this.staging);
    const step = this.step(ctx);
    // The inputs' offsets as every rank agreed on them in the fingerprint exchange, so all ranks
    // take the same schedule.
    const registered = registeredOffsetsOf(ctx, this.group.size);
    // An output in the inputs' segment is written in place; another is staged through segment 0's
    // slots, so inputs elsewhere then take the copying schedule.
    const outputAddress = this.buffers.offsetOf(outInfo);
    const outputOffset =
      registered !== null &&
      outputAddress >= 0 &&
      splitAddress(outputAddress).segment === registered.segment
        ? splitAddress(outputAddress).offset
        : -1;
    const offsets =
      registered !== null && (outputOffset >= 0 || registered.segment === 0) ? registered : null;
    if (offsets !== null) {
      if (outputOffset < 0) this.staging.staged(target.host.byteLength);
      await sharedReduceScatterRegistered(
        step,
        inInfo.dtype as 'f32' | 'i32',
        offsets,
        inInfo.count,
        target.host,
        outputOffset,
        op,
      );
      target.commit();
      return;
    }
    this.staging.staged(source.host.byteLength + target.host.byteLength);
    await sharedReduceScatter(step, inInfo.dtype, source.host, target.host, op);
    target.commit();
  }

  async broadcast(ctx: OpContext, info: OperandInfo, root: number): Promise<void> {
    const operand = await hostOperand('broadcast', info, this.group.rank !== root, this.staging);
    const bytes = bytesOf(operand.host);
    this.staging.staged(bytes.byteLength);
    await sharedBroadcast(this.step(ctx), bytes, root);
    if (this.group.rank !== root) operand.commit();
  }

  /** The shared-memory schedule's view of the op. */
  private step(ctx: OpContext): SharedStep {
    const arena = this.arena;
    return {
      rank: this.group.rank,
      size: this.group.size,
      arena,
      barrier: async () => {
        const stamp = { op: ctx.fields.op, seq: ctx.fields.seq, tag: this.group.tag };
        await arena.barrier((ranks) => ctx.waitFor(ranks), stamp);
        ctx.waitFor([]);
      },
    };
  }
}
